package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/cluster"
)

// addFakeNodes adds n more kwok nodes for one test, removed after it.
func addFakeNodes(t *testing.T, prefix string, n int) []string {
	var names []string
	for i := range n {
		node := cluster.KwokNode(fmt.Sprintf("%s-%d", prefix, i))
		require.NoError(t, k8s.Create(context.Background(), node))
		names = append(names, node.Name)
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), node) })
	}
	return names
}

// evict asks the eviction API to evict a pod, as `kubectl drain` does.
func evict(ns, pod string) error {
	return k8s.SubResource("eviction").Create(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod}},
		&policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod}})
}

// TestDrainIsASwitchover: a Database of three instances on three nodes.
// The eviction API refuses to evict the healthy primary (its budget) and
// lets a standby go; once the primary's node is cordoned (the first step
// of `kubectl drain`), the primary hands over to a standby on another
// node by a switchover, not a failover, and the former primary can then
// be evicted like any standby.
func TestDrainIsASwitchover(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	nodes := append(addFakeNodes(t, ns, 2), local.NodeName)
	startOperator(t, ns)
	db := newDatabase(ns, "drained", func(d *dbv1.Database) {
		d.Spec.Replicas = ptr.To[int32](3)
		// one instance per node, for sure
		d.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{TopologyKey: corev1.LabelHostname,
				LabelSelector: &metav1.LabelSelector{MatchLabels: resources.PodSelectorLabels(d)}}}}}
	})
	require.NoError(t, k8s.Create(ctx, db))
	waitCondition(t, db, dbv1.ConditionReplicationReady, metav1.ConditionTrue, dbv1.ReasonReplicating)

	primaryPod := func() *corev1.Pod {
		name := getDatabase(t, db).Status.Replication.CurrentPrimary
		pod := &corev1.Pod{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pod))
		return pod
	}
	// The disruption controller counts the healthy pods of each budget.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, name := range []string{resources.PodDisruptionBudgetName(db), resources.PrimaryDisruptionBudgetName(db)} {
			pdb := &policyv1.PodDisruptionBudget{}
			if assert.NoError(c, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pdb)) {
				assert.Equal(c, pdb.Generation, pdb.Status.ObservedGeneration, name)
				assert.NotZero(c, pdb.Status.CurrentHealthy, name)
			}
		}
	}, timeout, tick)
	old := primaryPod()
	require.Contains(t, nodes, old.Spec.NodeName)
	err := evict(ns, old.Name)
	require.Error(t, err, "the healthy primary was evicted")
	assert.True(t, apierrors.IsTooManyRequests(err), "want the budget's refusal, got %v", err)

	// kubectl drain: cordon, then evict until allowed.
	node := &corev1.Node{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: old.Spec.NodeName}, node))
	patch := client.MergeFrom(node.DeepCopy())
	node.Spec.Unschedulable = true
	require.NoError(t, k8s.Patch(ctx, node, patch))
	t.Cleanup(func() {
		patch := client.MergeFrom(node.DeepCopy())
		node.Spec.Unschedulable = false
		_ = k8s.Patch(context.Background(), node, patch)
	})
	// kubectl drain retries the eviction; it must not succeed before the
	// switchover ended (its pods are labelled neither primary nor
	// replica meanwhile)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, evict(ns, old.Name), "the former primary, now a standby, cannot be evicted")
	}, timeout, 20*time.Millisecond)
	r := getDatabase(t, db).Status.Replication
	require.NotEqual(t, old.Name, r.CurrentPrimary, "the primary was evicted before it handed over")
	require.Equal(t, r.CurrentPrimary, r.TargetPrimary, "the primary was evicted while it was switching over")
	now := primaryPod()
	assert.NotEqual(t, old.Spec.NodeName, now.Spec.NodeName, "handed over to a standby on the drained node")
	r = getDatabase(t, db).Status.Replication
	assert.Nil(t, r.LastFailover, "a drain failed over")
	assert.Equal(t, now.Name, r.CurrentPrimary, "the primary moved again")
}
