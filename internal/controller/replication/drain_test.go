package replication

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// place puts each pod on its node (pod → node), creating the Nodes.
func (f *fixture) place(nodes map[string]string) {
	ctx := context.Background()
	for pod, node := range nodes {
		p := &corev1.Pod{}
		require.NoError(f.t, f.c.Get(ctx, client.ObjectKey{Namespace: f.db.Namespace, Name: pod}, p))
		p.Spec.NodeName = node
		require.NoError(f.t, f.c.Update(ctx, p))
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
		if err := f.c.Create(ctx, n); err != nil {
			require.NoError(f.t, client.IgnoreAlreadyExists(err))
		}
	}
}

// cordon marks a node unschedulable, as `kubectl drain` does first.
func (f *fixture) cordon(node string) {
	n := &corev1.Node{}
	require.NoError(f.t, f.c.Get(context.Background(), client.ObjectKey{Name: node}, n))
	n.Spec.Unschedulable = true
	require.NoError(f.t, f.c.Update(context.Background(), n))
}

// TestDrainSwitchesOver: the primary's node is cordoned (a drain starts):
// the primary hands over to the best standby on a node that stays, by a
// switchover (demote, then promote), never a failover; the standby on
// another draining node is passed over although it lags less.
func TestDrainSwitchesOver(t *testing.T) {
	f, s := converged(t, 3)
	f.place(map[string]string{"orders-0": "node-a", "orders-1": "node-b", "orders-2": "node-c"})
	f.agents.SetPaused(f.db, "orders-2", true)
	f.agents.Write(f.db, 0x2000) // orders-1 is the most advanced
	f.agents.SetPaused(f.db, "orders-2", false)
	f.cordon("node-a")
	f.cordon("node-b")
	f.eventsText()
	calls := len(f.agents.Calls())
	f.run(s, 8)
	st := f.get().Status.Replication
	assert.Equal(t, "orders-2", st.CurrentPrimary, f.condition().Message)
	assert.Equal(t, []string{"orders-2"}, f.labelled(dbv1.RolePrimary))
	assert.Equal(t, []string{"demote orders-0", "promote orders-2"}, f.agents.Calls()[calls:calls+2])
	assert.Nil(t, st.LastFailover, "a drain failed over")
	ev := f.eventsText()
	assert.Contains(t, ev, "the primary's node node-a is cordoned")
	assert.Contains(t, ev, ReasonSwitchoverCompleted)
	assert.Equal(t, dbv1.ReasonReplicating, f.condition().Reason, f.condition().Message)

	// The new primary's node stays: nothing more moves.
	calls = len(f.agents.Calls())
	f.run(s, 3)
	assert.Equal(t, "orders-2", f.get().Status.Replication.CurrentPrimary)
	assert.NotContains(t, f.agents.Calls()[calls:], "demote orders-2")
}

// TestDrainWithoutAStandbyElsewhere: every instance runs on the cordoned
// node: nothing is switched over (the standby would be evicted next), and
// the condition says that the drain waits on the primary's budget.
func TestDrainWithoutAStandbyElsewhere(t *testing.T) {
	f, s := converged(t, 2)
	f.place(map[string]string{"orders-0": "node-a", "orders-1": "node-a"})
	f.cordon("node-a")
	calls := len(f.agents.Calls())
	f.run(s, 3)
	assert.Equal(t, "orders-0", f.get().Status.Replication.CurrentPrimary)
	assert.NotContains(t, f.agents.Calls()[calls:], "demote orders-0")
	c := f.condition()
	assert.Equal(t, metav1.ConditionTrue, c.Status, "replication itself is fine")
	assert.Contains(t, c.Message, "the primary's node node-a is cordoned (being drained), and no streaming standby on another node can take over")
	assert.Contains(t, c.Message, "PodDisruptionBudget orders-primary")
}

// TestNodeDrain: what counts as a node being emptied.
func TestNodeDrain(t *testing.T) {
	node := func(unschedulable bool, taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{Spec: corev1.NodeSpec{Unschedulable: unschedulable, Taints: taints}}
	}
	for name, tc := range map[string]struct {
		node *corev1.Node
		want string
	}{
		"schedulable":        {node(false), ""},
		"cordoned":           {node(true), "is cordoned (being drained)"},
		"autoscaler":         {node(false, corev1.Taint{Key: "ToBeDeletedByClusterAutoscaler", Effect: corev1.TaintEffectNoSchedule}), "carries the taint ToBeDeletedByClusterAutoscaler:NoSchedule (being emptied)"},
		"karpenter":          {node(false, corev1.Taint{Key: "karpenter.sh/disrupted", Effect: corev1.TaintEffectNoSchedule}), "carries the taint karpenter.sh/disrupted:NoSchedule (being emptied)"},
		"only preferred":     {node(false, corev1.Taint{Key: "ToBeDeletedByClusterAutoscaler", Effect: corev1.TaintEffectPreferNoSchedule}), ""},
		"a dedicated taint":  {node(false, corev1.Taint{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}), ""},
		"not-ready NoExecut": {node(false, corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute}), ""},
	} {
		assert.Equal(t, tc.want, nodeDrain(tc.node), name)
	}
}

// TestNodeEvents: only a change of the drain state of a node reconciles,
// and it reconciles every Database with an engine pod on it, once.
func TestNodeEvents(t *testing.T) {
	p := nodeDrainChanged()
	plain := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	cordoned := plain.DeepCopy()
	cordoned.Spec.Unschedulable = true
	heartbeat := plain.DeepCopy()
	heartbeat.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	assert.True(t, p.Update(event.UpdateEvent{ObjectOld: plain, ObjectNew: cordoned}))
	assert.True(t, p.Update(event.UpdateEvent{ObjectOld: cordoned, ObjectNew: plain}), "an uncordon")
	assert.False(t, p.Update(event.UpdateEvent{ObjectOld: plain, ObjectNew: heartbeat}), "a status update")
	assert.False(t, p.Create(event.CreateEvent{Object: plain}))

	db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}}
	other := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "carts"}}
	pod := func(db *dbv1.Database, ord int, node string) client.Object {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: resources.InstanceName(db, ord), Labels: resources.Labels(db, resources.ComponentDatabase)},
			Spec: corev1.PodSpec{NodeName: node}}
	}
	c := fake.NewClientBuilder().WithIndex(&corev1.Pod{}, indexPodNode, podNode).
		WithObjects(pod(db, 0, "node-a"), pod(db, 1, "node-a"), pod(db, 2, "node-b"), pod(other, 0, "node-b")).Build()
	got := databasesOnNode(c)(context.Background(), plain)
	assert.Equal(t, []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(db)}}, got)
	assert.Len(t, databasesOnNode(c)(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}}), 2)
}
