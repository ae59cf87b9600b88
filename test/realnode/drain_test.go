//go:build failover

package realnode

import (
	"context"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
	"github.com/dbkeeper/dbkeeper/test/framework/faults"
)

// The drain of the primary's node, on several real nodes: a scenario of
// TestNodeFaults (build tag nodes) and a fault of the comparison with
// CloudNativePG (build tag peer).

// switchoverGap bounds the write gap of a drain of the primary's node:
// a switchover's (4 s measured on one node), with room for three nodes
// on two cores.
const switchoverGap = 10 * time.Second

// nodeFaults are the node faults of the primary's node.
func (h *ha) nodeFaults() *faults.NodeFaults { return h.inj.Nodes(theNode) }

// nodeOf is the node of an instance's pod.
func (h *ha) nodeOf(instance string) string { return getPod(h.t, h.db, instance).Spec.NodeName }

// nodeRun is one run of a fault of the primary's node: the primary and
// its node before it, the last failover then, the writer straight to the
// old primary, and when the fault began.
type nodeRun struct {
	old, node string
	before    *dbv1.FailoverStatus
	fence     *dbtest.Writer
	at        time.Time
}

// startNodeRun waits for the whole topology, starts the writer straight
// to the primary and marks the start of run i of fault.
func (h *ha) startNodeRun(fault string, i int) nodeRun {
	old := h.converged()
	r := nodeRun{old: old, node: h.nodeOf(old), before: dbtest.Get(h.t, k8s, h.db).Status.Replication.LastFailover,
		fence: h.startFence(old), at: time.Now()}
	h.faultAt = r.at
	h.t.Logf("fault %s run %d: primary %s on %s", fault, i, old, r.node)
	return r
}

// drainPrimaryNode drains the primary's node as `kubectl drain` does:
// the primary's budget refuses its eviction until the replication
// controller switched over to a standby on another node; then every pod
// of the node goes. Measured: the longest write gap through <name> from
// the drain's start until the Database is whole again (the node back).
func (h *ha) drainPrimaryNode(i int) {
	t := h.t
	t.Helper()
	run := h.startNodeRun("node-drained", i)
	defer run.fence.Stop()
	old, node, lastBefore, fence, at := run.old, run.node, run.before, run.fence, run.at
	ctx, cancel := context.WithTimeout(context.Background(), convergeTimeout)
	defer cancel()
	uncordon, err := h.nodeFaults().Drain(ctx, node)
	if uncordon != nil {
		t.Cleanup(func() { _ = uncordon() })
	}
	require.NoError(t, err, "draining %s", node)
	drained := time.Since(at)
	time.Sleep(time.Second)
	live := dbtest.Get(t, k8s, h.db)
	r := live.Status.Replication
	assert.NotEqual(t, old, r.CurrentPrimary, "the primary handed over before its node was drained")
	assert.Equal(t, lastBefore, r.LastFailover, "a drain failed over")
	assert.NotEqual(t, node, h.nodeOf(r.CurrentPrimary), "the new primary is on the drained node")
	fence.Stop()
	// back: the evicted instances return to their volumes on the node
	require.NoError(t, uncordon())
	primary := h.converged()
	// the measure runs until the Database is whole again: a pause that
	// comes after the drain is done counts too
	gap := h.w.LongestGap(at)
	h.measured["node-drained"] = append(h.measured["node-drained"], gap)
	t.Logf("MEASURED failover node-drained run %d: longest write gap %s until whole again (drain done in %s)", i, gap.Round(time.Millisecond), drained.Round(time.Millisecond))
	assert.Less(t, gap, switchoverGap, "writes through <name> paused for a switchover only")
	h.assertOnlyPrimaryWrites(primary)
	h.assertAcknowledged(fence, false)
}
