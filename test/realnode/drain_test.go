//go:build failover

package realnode

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
	"github.com/dbkeeper/dbkeeper/test/framework/faults"
)

// The drain of the primary's node and the power-off of the leading
// manager's node with the primary's, on several real nodes: scenarios of
// TestNodeFaults and TestNodeOfTheOperator (build tag nodes) and faults
// of the comparison with CloudNativePG (build tag peer).

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

// operatorNodePoweredOff moves the primary onto the leading manager's node
// (a switchover), then powers that node off.
func (h *ha) operatorNodePoweredOff(system string, i int) {
	t := h.t
	leader := leaderOf(t, system)
	node := podIn(t, system, leader).Spec.NodeName
	if primary := h.converged(); h.nodeOf(primary) != node {
		var target string
		for i := range haInstances {
			if name := resources.InstanceName(h.db, i); h.nodeOf(name) == node {
				target = name
			}
		}
		require.NotEmpty(t, target, "no instance on the leader's node %s", node)
		dbtest.Patch(t, k8s, h.db, func(d *dbv1.Database) {
			d.Annotations = map[string]string{dbv1.AnnotationSwitchoverTo: target}
		})
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, target, dbtest.Get(c, k8s, h.db).Status.Replication.CurrentPrimary)
		}, timeout, 250*time.Millisecond, "switched over to %s", target)
	}
	waitReplicasSettled(t, "the manager", h.healedAt, func() ([]corev1.Pod, error) {
		pods := &corev1.PodList{}
		err := k8s.List(context.Background(), pods, client.InNamespace(system), client.MatchingLabels{"app.kubernetes.io/name": "dbkeeper"})
		return pods.Items, err
	})
	t.Logf("run %d: the leading manager %s and the primary %s on %s", i, leader, h.converged(), node)
	h.run(faultKind{"operator-node-powered-off", func(h *ha, primary string, at time.Time) injected {
		on, err := h.nodeFaults().PowerOff(node)
		require.NoError(h.t, err)
		h.t.Cleanup(func() { _ = on() })
		return injected{heal: func() { require.NoError(h.t, on()); h.healedAt = time.Now() }, failover: true, fenceBy: func() time.Time { return at }}
	}}, i)
	assert.NotEqual(t, leader, leaderOf(t, system), "the other manager replica leads")
	if m := h.measured["operator-node-powered-off"]; len(m) > 0 && m[len(m)-1] > operatorNodeGoal {
		// over the goal without failing: the logs say where the time went
		saveManagerLogs(t, system, fmt.Sprintf("run %d took %s, over %s", i, m[len(m)-1].Round(time.Millisecond), operatorNodeGoal))
	}
}

// operatorNodeGoal is issue 31's bound on a failover when the leading
// manager's node is lost with the primary's.
const operatorNodeGoal = 30 * time.Second

// operatorLeaseDuration and operatorRenewDeadline are the leader
// election's lease duration and renew deadline of both operators compared
// (dbkeeper's chart's leaderElection, CloudNativePG's
// --leader-lease-duration and --leader-renew-deadline): a replica that
// (re)started cannot take the lease before it has watched it unrenewed
// for the lease duration, and a leader thawed with its node goes on
// believing it leads until its renew deadline passes (then it exits and
// restarts).
const (
	operatorLeaseDuration = 15 * time.Second
	operatorRenewDeadline = 10 * time.Second
)

// waitReplicasSettled waits until the renew deadline has passed since
// the last node that took a replica came back (healed; zero: none did),
// and then until every replica of an operator (list lists their pods) is
// Ready and its container has run for more than operatorLeaseDuration. A
// run that powers off the leader's node right after the previous run
// brought a node back would otherwise find the follower about to exit or
// just restarted (the thawed replica believes it leads until its renew
// deadline, then exits): a candidate counts a lease's duration from its
// own first sight of it, so that follower takes the lease a whole lease
// duration after its start (runs measured 31.7 to 40.9 s, 10 to 20 s of
// them that wait).
func waitReplicasSettled(t *testing.T, what string, healed time.Time, list func() ([]corev1.Pod, error)) {
	t.Helper()
	time.Sleep(time.Until(healed.Add(operatorRenewDeadline + 2*time.Second)))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pods, err := list()
		if !assert.NoError(c, err) || !assert.NotEmpty(c, pods, "%s's pods", what) {
			return
		}
		for _, pod := range pods {
			assert.True(c, pod.DeletionTimestamp == nil && podReady(&pod), "%s replica %s Ready", what, pod.Name)
			for _, cs := range pod.Status.ContainerStatuses {
				if assert.NotNil(c, cs.State.Running, "%s replica %s: container %s running", what, pod.Name, cs.Name) {
					assert.Greater(c, time.Since(cs.State.Running.StartedAt.Time), operatorLeaseDuration+2*time.Second,
						"%s replica %s: container %s started long enough ago to take the lease", what, pod.Name, cs.Name)
				}
			}
		}
	}, timeout, 500*time.Millisecond, "%s's replicas settled", what)
}
