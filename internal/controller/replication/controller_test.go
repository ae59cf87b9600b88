package replication

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance/agentstest"
	"github.com/dbkeeper/dbkeeper/internal/instance/instancetest"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// fixture is a Database with its pods, the StatefulSet's revision, fake
// agents and servers, and the controller's reconciler.
type fixture struct {
	t        *testing.T
	c        client.Client
	agents   *agentstest.Agents
	servers  *instancetest.Servers
	events   *events.FakeRecorder
	db       *dbv1.Database
	revision string
	// deleted are the pods the controller deleted, in order.
	deleted []string
	// gone are pods the StatefulSet does not bring back (a node lost).
	gone map[string]bool
}

func newFixture(t *testing.T, n int32) *fixture {
	db := facettest.Database()
	db.Spec.Replicas = ptr.To(n)
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: db.Name},
		Status: appsv1.StatefulSetStatus{UpdateRevision: "r1"}}
	secrets := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: resources.ReplicationSecretName(db)},
			Data: map[string][]byte{resources.ReplicationPasswordKey: []byte("repl-pw"), resources.AgentTokenKey: []byte("token")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: resources.SuperuserSecretName(db)},
			Data: map[string][]byte{engine.UsernameKey: []byte("postgres"), engine.PasswordKey: []byte("super-pw")}},
	}
	f := &fixture{t: t, c: facettest.Client(t, append(secrets, db, sts)...), agents: agentstest.New(), servers: instancetest.New(),
		events: events.NewFakeRecorder(1000), db: db, revision: "r1"}
	f.pods()
	return f
}

// pods plays the StatefulSet controller: every missing pod below the
// wanted count (at least ordinal(currentPrimary)+1) is created at the
// current revision, ready, and pods above it are deleted.
func (f *fixture) pods() {
	ctx := context.Background()
	db := f.get()
	want := int(*db.Spec.Replicas)
	if r := db.Status.Replication; r != nil && r.CurrentPrimary != "" {
		if ord, ok := resources.InstanceOrdinal(db, r.CurrentPrimary); ok {
			want = max(want, ord+1)
		}
	}
	for ord := range 9 {
		name := resources.InstanceName(db, ord)
		pod := &corev1.Pod{}
		err := f.c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, pod)
		exists := err == nil
		switch {
		case ord < want && !exists && !f.gone[name]:
			pod = &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: name, UID: types.UID(fmt.Sprintf("%s-%d", name, time.Now().UnixNano())),
					Labels: resources.PodSelectorLabels(db)},
				Status: corev1.PodStatus{PodIP: fmt.Sprintf("198.18.0.%d", 10+ord),
					Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
			}
			pod.Labels[appsv1.ControllerRevisionHashLabelKey] = f.revision
			require.NoError(f.t, f.c.Create(ctx, pod))
		case ord >= want && exists:
			require.NoError(f.t, f.c.Delete(ctx, pod))
		}
	}
}

func (f *fixture) get() *dbv1.Database {
	db := &dbv1.Database{}
	require.NoError(f.t, f.c.Get(context.Background(), client.ObjectKeyFromObject(f.db), db))
	return db
}

func (f *fixture) syncer() *syncer {
	return &syncer{client: &deleteRecorder{Client: f.c, f: f}, reader: f.c, writer: facet.WriterFor(f.c, f.events, Name),
		agents: f.agents, instances: f.servers, now: time.Now}
}

// deleteRecorder records the pods the controller deletes.
type deleteRecorder struct {
	client.Client
	f *fixture
}

func (d *deleteRecorder) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	d.f.deleted = append(d.f.deleted, obj.GetName())
	return d.Client.Delete(ctx, obj, opts...)
}

// step runs one reconcile with s, then lets the StatefulSet catch up, and
// checks that no two pods carry the primary label.
func (f *fixture) step(s *syncer) {
	r := facet.NewReconciler(f.c, s.writer, dbv1.ConditionReplicationReady, s, facet.Options{})
	_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.db)})
	require.NoError(f.t, err)
	f.pods()
	assert.LessOrEqual(f.t, len(f.labelled(dbv1.RolePrimary)), 1, "two pods labelled primary")
}

// run runs n reconciles with one syncer.
func (f *fixture) run(s *syncer, n int) {
	for range n {
		f.step(s)
	}
}

// labelled are the pods with the role label role.
func (f *fixture) labelled(role string) []string {
	list := &corev1.PodList{}
	require.NoError(f.t, f.c.List(context.Background(), list))
	var out []string
	for _, p := range list.Items {
		if p.Labels[dbv1.LabelRole] == role {
			out = append(out, p.Name)
		}
	}
	slices.Sort(out)
	return out
}

func (f *fixture) condition() metav1.Condition {
	for _, c := range f.get().Status.Conditions {
		if c.Type == dbv1.ConditionReplicationReady {
			return c
		}
	}
	return metav1.Condition{}
}

func (f *fixture) annotate(target string) {
	db := f.get()
	if db.Annotations == nil {
		db.Annotations = map[string]string{}
	}
	db.Annotations[dbv1.AnnotationSwitchoverTo] = target
	require.NoError(f.t, f.c.Update(context.Background(), db))
}

func (f *fixture) eventsText() string {
	var all []string
	for {
		select {
		case e := <-f.events.Events:
			all = append(all, e)
		default:
			return strings.Join(all, "\n")
		}
	}
}

// converged is a fixture of n instances bootstrapped and streaming.
func converged(t *testing.T, n int32) (*fixture, *syncer) {
	f := newFixture(t, n)
	s := f.syncer()
	f.run(s, 3*int(n)+3)
	require.Equal(t, dbv1.ReasonReplicating, f.condition().Reason, f.condition().Message)
	return f, s
}

// TestBootstrap: the first primary is initdb'd on instance 0 only, then
// each standby is cloned; the pods carry their roles, the status lists
// every instance in ordinal order, and the primary has the replication
// role and one slot per standby.
func TestBootstrap(t *testing.T) {
	f, _ := converged(t, 3)
	assert.Equal(t, []string{"bootstrap orders-0 initdb", "bootstrap orders-1 clone", "bootstrap orders-2 clone"}, f.agents.Calls())
	assert.Equal(t, []string{"orders-0"}, f.labelled(dbv1.RolePrimary))
	assert.Equal(t, []string{"orders-1", "orders-2"}, f.labelled(dbv1.RoleReplica))
	st := f.get().Status.Replication
	require.NotNil(t, st)
	assert.Equal(t, "orders-0", st.CurrentPrimary)
	assert.Equal(t, "orders-0", st.TargetPrimary)
	assert.NotEmpty(t, st.SystemID)
	require.Len(t, st.Instances, 3)
	for i, row := range st.Instances {
		assert.Equal(t, fmt.Sprintf("orders-%d", i), row.Name)
		assert.True(t, row.Ready)
	}
	assert.Equal(t, "primary", st.Instances[0].Role)
	assert.Equal(t, "streaming", st.Instances[1].WALReceiver)
	require.NotNil(t, st.Instances[1].LagBytes)
	assert.Zero(t, *st.Instances[1].LagBytes)
	assert.True(t, f.servers.CanLogin(f.db, agentapi.ReplicationUser, "repl-pw"), "the replication role has the Secret's password")
	assert.Equal(t, []string{"dbkeeper_orders_1", "dbkeeper_orders_2"}, f.servers.Slots(f.db))
}

// TestNoInitdbWhenDataExists: an instance with data and no primary is not
// papered over with a new cluster.
func TestNoInitdbWhenDataExists(t *testing.T) {
	f := newFixture(t, 2)
	ctx := context.Background()
	pod := &corev1.Pod{}
	require.NoError(t, f.c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders-1"}, pod))
	_, err := f.agents.Bootstrap(ctx, f.db, pod, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	_, err = f.agents.Demote(ctx, f.db, pod)
	require.NoError(t, err)
	f.run(f.syncer(), 3)
	assert.Equal(t, []string{"bootstrap orders-1 initdb", "demote orders-1"}, f.agents.Calls())
	assert.Equal(t, dbv1.ReasonInstanceUnhealthy, f.condition().Reason)
	assert.Contains(t, f.condition().Message, "orders-1 has data")
	assert.Empty(t, f.labelled(dbv1.RolePrimary))
}

// TestLagAndUnhealthyStandby: a standby that stops streaming shows its
// lag, loses its replica label, and the condition names it.
func TestLagAndUnhealthyStandby(t *testing.T) {
	f, s := converged(t, 3)
	f.agents.SetPaused(f.db, "orders-2", true)
	f.agents.Write(f.db, 4096)
	f.step(s)
	st := f.get().Status.Replication
	require.NotNil(t, st.Instances[2].LagBytes)
	assert.Equal(t, int64(4096), *st.Instances[2].LagBytes)
	assert.Empty(t, st.Instances[2].WALReceiver)
	assert.Equal(t, []string{"orders-1"}, f.labelled(dbv1.RoleReplica), "a standby that does not stream leaves the read-only Service")
	c := f.condition()
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, dbv1.ReasonInstanceUnhealthy, c.Reason)
	assert.Contains(t, c.Message, "orders-2")
}

// TestUnreachableAgent: an instance whose agent does not answer is
// Unreachable and labelled nothing, even the primary.
func TestUnreachableAgent(t *testing.T) {
	f, s := converged(t, 2)
	f.agents.SetUnreachable(f.db, "orders-0", true)
	f.step(s)
	assert.Empty(t, f.labelled(dbv1.RolePrimary))
	st := f.get().Status.Replication
	assert.Equal(t, StateUnreachable, st.Instances[0].State)
	assert.Equal(t, "orders-0", st.CurrentPrimary, "the recorded primary stays: no failover")
	assert.Equal(t, dbv1.ReasonInstanceUnhealthy, f.condition().Reason)
	f.agents.SetUnreachable(f.db, "orders-0", false)
	f.step(s)
	assert.Equal(t, []string{"orders-0"}, f.labelled(dbv1.RolePrimary))
}

// TestSwitchover: the annotation moves the primary: demote, wait, promote,
// relabel, restart the others' WAL receivers, and the annotation goes.
func TestSwitchover(t *testing.T) {
	f, s := converged(t, 3)
	f.eventsText()
	f.annotate("orders-2")
	f.run(s, 8)
	calls := f.agents.Calls()[3:]
	require.Len(t, calls, 4)
	assert.Equal(t, []string{"demote orders-0", "promote orders-2"}, calls[:2])
	assert.ElementsMatch(t, []string{"detach orders-0", "detach orders-1"}, calls[2:],
		"the other instances' WAL receivers start again once the new primary is labelled")
	st := f.get().Status.Replication
	assert.Equal(t, "orders-2", st.CurrentPrimary)
	assert.Equal(t, "orders-2", st.TargetPrimary)
	assert.Empty(t, st.SwitchoverLSN)
	assert.Equal(t, []string{"orders-2"}, f.labelled(dbv1.RolePrimary))
	assert.Equal(t, []string{"orders-0", "orders-1"}, f.labelled(dbv1.RoleReplica))
	assert.NotContains(t, f.get().Annotations, dbv1.AnnotationSwitchoverTo)
	assert.Equal(t, dbv1.ReasonReplicating, f.condition().Reason)
	ev := f.eventsText()
	for _, want := range []string{ReasonSwitchoverStarted, ReasonDemoted, ReasonPromoted, ReasonSwitchoverCompleted} {
		assert.Contains(t, ev, want)
	}
	assert.Contains(t, ev, "Switched over from orders-0 to orders-2 at")
	assert.Equal(t, map[string]agentapi.Role{"orders-0": agentapi.RoleReplica, "orders-1": agentapi.RoleReplica, "orders-2": agentapi.RolePrimary}, f.agents.Roles(f.db))
}

// TestSwitchoverEnds: once a switchover finished and its aftermath passed,
// the manager no longer counts the Database as in transition (which reads
// the Database from the API server on every reconcile and asks silent
// agents with the short timeout). Before, the finishing step stored its
// start time again, and it stayed there for good.
func TestSwitchoverEnds(t *testing.T) {
	f, s := converged(t, 3)
	clock := time.Now()
	s.now = func() time.Time { return clock }
	f.annotate("orders-2")
	f.run(s, 8)
	require.Equal(t, "orders-2", f.get().Status.Replication.CurrentPrimary)
	clock = clock.Add(fastAftermath + time.Second)
	f.run(s, 2)
	assert.False(t, s.inTransition(f.get()), "a switchover that ended %s ago still counts as running", fastAftermath)
}

// TestSwitchoverRefused: a target that cannot take over is refused with
// the annotation named, and nothing is demoted.
func TestSwitchoverRefused(t *testing.T) {
	for name, tc := range map[string]struct {
		target string
		break_ func(f *fixture)
		want   string
	}{
		"unknown pod":   {target: "orders-7", want: "not an instance"},
		"other name":    {target: "payments-1", want: "not an instance"},
		"not ready":     {target: "orders-1", break_: func(f *fixture) { f.agents.SetStopped(f.db, "orders-1", true) }, want: "Failed"},
		"not streaming": {target: "orders-1", break_: func(f *fixture) { f.agents.SetPaused(f.db, "orders-1", true) }, want: "does not stream"},
		"lagging": {target: "orders-1", break_: func(f *fixture) {
			f.agents.SetPaused(f.db, "orders-1", true)
			f.agents.Write(f.db, 1<<30)
		}, want: "does not stream"},
	} {
		t.Run(name, func(t *testing.T) {
			f, s := converged(t, 2)
			if tc.break_ != nil {
				tc.break_(f)
			}
			f.annotate(tc.target)
			f.run(s, 3)
			c := f.condition()
			assert.Equal(t, dbv1.ReasonSwitchoverRefused, c.Reason)
			assert.Contains(t, c.Message, dbv1.AnnotationSwitchoverTo)
			assert.Contains(t, c.Message, tc.want)
			assert.Len(t, f.agents.Calls(), 2, "nothing demoted")
			assert.Equal(t, []string{"orders-0"}, f.labelled(dbv1.RolePrimary))
			assert.Equal(t, "orders-0", f.get().Status.Replication.TargetPrimary)
		})
	}
}

// TestRestartDuringSwitchover: a manager stopped after any step of a
// switchover, and a new one with nothing in memory, end with exactly one
// primary, the target, and every label right; never two primary labels.
func TestRestartDuringSwitchover(t *testing.T) {
	for stop := 1; stop <= 6; stop++ {
		t.Run(fmt.Sprintf("after step %d", stop), func(t *testing.T) {
			f, s := converged(t, 3)
			f.annotate("orders-1")
			f.run(s, stop)
			f.run(f.syncer(), 8)
			st := f.get().Status.Replication
			assert.Equal(t, "orders-1", st.CurrentPrimary)
			assert.Equal(t, []string{"orders-1"}, f.labelled(dbv1.RolePrimary))
			assert.Equal(t, []string{"orders-0", "orders-2"}, f.labelled(dbv1.RoleReplica))
			roles := f.agents.Roles(f.db)
			assert.Equal(t, agentapi.RolePrimary, roles["orders-1"])
			assert.Equal(t, agentapi.RoleReplica, roles["orders-0"])
			assert.Equal(t, dbv1.ReasonReplicating, f.condition().Reason, f.condition().Message)
		})
	}
}

// TestScaleDownPrimaryLast: 3 → 1 with the primary at ordinal 2 switches
// over to a remaining instance first, and no slot is left behind.
func TestScaleDownPrimaryLast(t *testing.T) {
	f, s := converged(t, 3)
	f.annotate("orders-2")
	f.run(s, 8)
	require.Equal(t, "orders-2", f.get().Status.Replication.CurrentPrimary)
	db := f.get()
	db.Spec.Replicas = ptr.To[int32](1)
	db.Generation++
	require.NoError(t, f.c.Update(context.Background(), db))
	f.run(s, 10)
	st := f.get().Status.Replication
	assert.Equal(t, "orders-0", st.CurrentPrimary)
	assert.Equal(t, []string{"orders-0"}, f.labelled(dbv1.RolePrimary))
	require.Len(t, st.Instances, 1)
	assert.Empty(t, f.servers.Slots(f.db), "scale-down leaves no slot behind")
	assert.Equal(t, dbv1.ReasonReplicating, f.condition().Reason, f.condition().Message)
}

// TestRollout: with OnDelete, outdated standbys are deleted one at a time
// first, then the primary hands over, then the former primary restarts.
func TestRollout(t *testing.T) {
	f, s := converged(t, 3)
	sts := &appsv1.StatefulSet{}
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: "orders"}, sts))
	sts.Status.UpdateRevision = "r2"
	require.NoError(t, f.c.Status().Update(context.Background(), sts))
	f.revision = "r2"
	f.step(s)
	assert.Equal(t, dbv1.ReasonRollingUpdate, f.condition().Reason)
	f.run(s, 20)
	assert.Equal(t, []string{"orders-2", "orders-1", "orders-0"}, f.deleted, "standbys first, the former primary last")
	calls := f.agents.Calls()
	assert.Contains(t, calls, "demote orders-0")
	st := f.get().Status.Replication
	assert.NotEqual(t, "orders-0", st.CurrentPrimary, "the primary switched over before its pod was deleted")
	assert.Len(t, f.labelled(dbv1.RolePrimary), 1)
	assert.Len(t, f.labelled(dbv1.RoleReplica), 2)
	assert.Equal(t, dbv1.ReasonReplicating, f.condition().Reason, f.condition().Message)
}

// TestRolloutSingleInstance: one instance is just deleted.
func TestRolloutSingleInstance(t *testing.T) {
	f, s := converged(t, 1)
	sts := &appsv1.StatefulSet{}
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: "orders"}, sts))
	sts.Status.UpdateRevision = "r2"
	require.NoError(t, f.c.Status().Update(context.Background(), sts))
	f.revision = "r2"
	f.run(s, 4)
	assert.Equal(t, []string{"orders-0"}, f.deleted)
	assert.Equal(t, []string{"orders-0"}, f.labelled(dbv1.RolePrimary))
	assert.Len(t, f.agents.Calls(), 1, "no switchover")
}

// TestDisabled: the stand-in of a disabled controller says so and leaves
// the role labels alone.
func TestDisabled(t *testing.T) {
	f, _ := converged(t, 2)
	d := &facet.Disabled{Client: f.c, Writer: facet.WriterFor(f.c, f.events, Name), ConditionType: dbv1.ConditionReplicationReady,
		Consequence: noFailoverDisabled}
	f.agents.SetUnreachable(f.db, "orders-0", true)
	_, err := d.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.db)})
	require.NoError(t, err)
	c := f.condition()
	assert.Equal(t, metav1.ConditionUnknown, c.Status)
	assert.Equal(t, dbv1.ReasonControllerDisabled, c.Reason)
	assert.Contains(t, c.Message, "no failover")
	assert.Equal(t, []string{"orders-0"}, f.labelled(dbv1.RolePrimary))
	assert.Equal(t, []string{"orders-1"}, f.labelled(dbv1.RoleReplica))
}

// TestPreAgentPodUpgrade: the pod of a Database made before dbkeeper had
// replication (no agent to ask: it runs the image's entrypoint) is its
// primary: it is labelled at once, so the read-write Service, which now
// selects the role, keeps reaching it, and it is restarted onto the agent
// by the rollout. Found in review: without it, an upgraded Database
// waited forever for an agent that is not there, with no endpoint behind
// <name>.
func TestPreAgentPodUpgrade(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	db := f.get()
	name := resources.InstanceName(db, 0)
	pod := &corev1.Pod{}
	require.NoError(t, f.c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, pod))
	pod.Spec.Containers = []corev1.Container{{Name: "engine", Image: "postgres:17"}}
	pod.Labels[appsv1.ControllerRevisionHashLabelKey] = "pre-agent"
	require.NoError(t, f.c.Update(ctx, pod))
	s := f.syncer()

	f.step(s)
	assert.Equal(t, []string{name}, f.labelled(dbv1.RolePrimary), "the pre-agent pod is the primary behind <name>")
	st := f.get().Status.Replication
	require.NotNil(t, st)
	assert.Equal(t, name, st.CurrentPrimary)
	assert.Empty(t, f.deleted, "nothing is deleted before the primary is recorded and labelled")

	f.step(s)
	assert.Equal(t, []string{name}, f.deleted, "the rollout restarts the pre-agent pod onto the agent")
	assert.Equal(t, dbv1.ReasonRollingUpdate, f.condition().Reason, f.condition().Message)
}
