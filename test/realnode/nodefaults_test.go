//go:build failover && nodes

package realnode

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/cluster"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
)

// The node faults (issue 31) run on a cluster of three real nodes, each
// in its own network namespace with its own kubelet, containerd and
// kube-proxy (realnode.Options.Nodes): `make test-nodes`.
// They run PostgreSQL 17 only, so each node imports that image alone.
func init() {
	realNodes = 3
	realImages = []string{cluster.ImagePause, "postgres:17", cluster.ImageManager}
	extraFaultKinds = append(extraFaultKinds, nodeFaultKinds...)
}

// nodeFaultKinds lose the primary with its node.
var nodeFaultKinds = []faultKind{
	{"node-powered-off", func(h *ha, primary string, at time.Time) injected {
		// every process of the node frozen and its link down: the
		// kubelet reports nothing, the pod stays Ready in the API until
		// the node controller's grace period; the primary Lease, not
		// renewed, is what proves the primary gone
		on, err := h.nodeFaults().PowerOff(h.nodeOf(primary))
		require.NoError(h.t, err)
		h.t.Cleanup(func() { _ = on() })
		return injected{heal: func() { require.NoError(h.t, on()) }, failover: true,
			fenceBy: func() time.Time { return at }}
	}},
	{"node-isolated", func(h *ha, primary string, at time.Time) injected {
		// the node runs on, cut off from the other nodes and from the
		// API server: its primary must fence itself (it cannot renew the
		// Lease), and a standby elsewhere is promoted
		undo, err := h.nodeFaults().Isolate(context.Background(), h.nodeOf(primary))
		require.NoError(h.t, err)
		h.t.Cleanup(func() { _ = undo() })
		return injected{heal: func() { require.NoError(h.t, undo()) }, failover: true,
			fenceBy: func() time.Time { return at }}
	}},
}

// TestNodeFaults: a Database of three instances, synchronous (ANY 1,
// Required), spread over three nodes by default. Not parallel: the
// failover suite's tests start once it is done (a node powered off would
// take their pods with it). A drain of the primary's
// node is a switchover (no failover, a switchover's write gap, nothing
// lost); the primary's node powered off or isolated is a failover that
// loses no acknowledged write, and the node, back, rejoins as a standby.
func TestNodeFaults(t *testing.T) {
	selected := runsOf("node-drained", 1) + runsOf("node-partitioned", 1)
	for _, kind := range nodeFaultKinds {
		selected += runsOf(kind.name, 1)
	}
	if selected == 0 {
		t.Skip("DBKEEPER_FAILOVER_FAULTS selects none of the node faults")
	}
	h := startHA(t, "nodes", true)
	assertSpread(t, h.db)
	for i := range runsOf("node-drained", 1) {
		h.drainPrimaryNode(i + 1)
	}
	for i := range runsOf("node-partitioned", 1) {
		h.partitionPrimaryNode(i + 1)
	}
	for _, kind := range nodeFaultKinds {
		for i := range runsOf(kind.name, 1) {
			h.run(kind, i+1)
		}
	}
	h.summary()
}

// assertSpread: the instances of one Database run on distinct nodes, by
// default (spec.topologySpreadConstraints and spec.affinity unset).
func assertSpread(t *testing.T, db *dbv1.Database) {
	t.Helper()
	pods := &corev1.PodList{}
	require.NoError(t, k8s.List(context.Background(), pods, client.InNamespace(db.Namespace), client.MatchingLabels(resources.PodSelectorLabels(db))))
	nodes := map[string]string{}
	for _, p := range pods.Items {
		if other, ok := nodes[p.Spec.NodeName]; ok {
			assert.Failf(t, "two instances on one node", "%s and %s on %s", other, p.Name, p.Spec.NodeName)
		}
		nodes[p.Spec.NodeName] = p.Name
	}
	assert.Len(t, nodes, haInstances, "instances by node: %v", nodes)
}

// partitionHeld is how long the primary's node stays cut off from the
// other nodes: longer than the primary Lease's duration (15 s) and the
// agent's renew deadline, so that a failover the Lease allowed would have
// happened.
const partitionHeld = 30 * time.Second

// partitionPrimaryNode cuts the primary's node off from the other nodes
// only: the API server and the operator still reach it. The primary
// keeps renewing its Lease, so nothing may fail over: no standby can
// confirm a commit (synchronous, Required), so no write is acknowledged
// until the partition heals, and then writes go on on the same primary
// with nothing lost. Measured: heal → first acknowledged write.
func (h *ha) partitionPrimaryNode(i int) {
	t := h.t
	t.Helper()
	run := h.startNodeRun("node-partitioned", i)
	defer run.fence.Stop()
	old, node, lastBefore, fence, at := run.old, run.node, run.before, run.fence, run.at
	undo, err := h.nodeFaults().PartitionFromNodes(node)
	require.NoError(t, err)
	t.Cleanup(func() { _ = undo() })
	deadline := time.Now().Add(partitionHeld)
	for time.Now().Before(deadline) {
		r := dbtest.Get(t, k8s, h.db).Status.Replication
		require.Equal(t, old, r.CurrentPrimary, "a primary that holds its Lease lost its role to a partition between nodes")
		require.Equal(t, lastBefore, r.LastFailover, "a partition between nodes failed over")
		time.Sleep(500 * time.Millisecond)
	}
	// a commit in flight at the cut may be acknowledged in its first
	// moments; none after the Lease's duration: no standby confirms
	quiet := at.Add(15 * time.Second)
	for _, w := range []*dbtest.Writer{h.w, fence} {
		if last, ok := w.LastAck(); ok {
			assert.True(t, last.Before(quiet), "a write acknowledged at %s, %s into the partition, with no standby to confirm it",
				last.Format(time.RFC3339Nano), last.Sub(at).Round(time.Millisecond))
		}
	}
	healed := time.Now()
	require.NoError(t, undo())
	require.Eventually(t, func() bool { _, ok := h.w.FirstAckAfter(healed); return ok }, convergeTimeout, 100*time.Millisecond,
		"writes through <name> go on once the partition healed")
	first, _ := h.w.FirstAckAfter(healed)
	h.measured["node-partitioned"] = append(h.measured["node-partitioned"], first.Sub(healed))
	t.Logf("MEASURED failover node-partitioned run %d: heal→write %s", i, first.Sub(healed).Round(time.Millisecond))
	fence.Stop()
	primary := h.converged()
	assert.Equal(t, old, primary, "the primary changed after a partition between nodes")
	assert.Equal(t, lastBefore, dbtest.Get(t, k8s, h.db).Status.Replication.LastFailover, "a partition between nodes failed over")
	h.assertOnlyPrimaryWrites(primary)
	h.assertAcknowledged(fence, false)
}

// TestNodeOfTheOperator: the operator installed with the chart (two
// replicas, leader election) and a Database of three instances on three
// nodes; the node that runs both the leading manager and the primary is
// powered off. The other manager replica takes the leader-election Lease
// (leaseDuration 15 s) and fails over: writes come back, nothing
// acknowledged is lost, and the node, powered on, rejoins.
func TestNodeOfTheOperator(t *testing.T) {
	runs := runsOf("operator-node-powered-off", 1)
	if runs == 0 {
		t.Skip("DBKEEPER_FAILOVER_FAULTS leaves operator-node-powered-off out")
	}
	ctx := context.Background()
	system, apps := newNamespace(t), newNamespace(t)
	helmInstall(t, system, apps)
	managers := &corev1.PodList{}
	require.NoError(t, k8s.List(ctx, managers, client.InNamespace(system), client.MatchingLabels{"app.kubernetes.io/name": "dbkeeper"}))
	require.Len(t, managers.Items, 2, "the chart's two manager replicas")
	require.NotEqual(t, managers.Items[0].Spec.NodeName, managers.Items[1].Spec.NodeName, "the manager replicas share a node")

	h := startHAIn(t, apps, "opnode", true, nil)
	for i := range runs {
		h.operatorNodePoweredOff(system, i+1)
	}
	h.summary()
}
