//go:build failover && peer

package realnode

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
	"github.com/dbkeeper/dbkeeper/test/framework/cluster"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
	"github.com/dbkeeper/dbkeeper/test/framework/faults"
	"github.com/dbkeeper/dbkeeper/test/framework/peer/cnpg"
)

// The failover comparison with CloudNativePG (issue 28): the same faults
// of the primary, on the same real node in the same test binary, against
// a dbkeeper Database (the failover suite's: startHA, ha.run) and against
// a CloudNativePG Cluster of the same shape (three instances, the
// project's PostgreSQL 17 image, the same storage class and size,
// synchronous ANY 1 with required durability), each written to by the
// same writer through its read-write Service. Each side runs alone: first
// dbkeeper's Database, dropped once measured, then CloudNativePG's
// Cluster (its operator, installed first, idles meanwhile).
const (
	// peerRunsEnv is how many runs of each fault each side gets (5 by
	// default).
	peerRunsEnv = "DBKEEPER_PEER_RUNS"
	// peerFaultsEnv, when set, lists (comma-separated) the faults to run,
	// a subset of peerFaults.
	peerFaultsEnv = "DBKEEPER_PEER_FAULTS"
	// peerTableEnv, when set, names the file the markdown table is
	// written to.
	peerTableEnv = "DBKEEPER_PEER_TABLE"
	// peerSidesEnv, when set, names the one side to run (dbkeeper or
	// CloudNativePG), to repeat it alone; the table then has the other
	// side's cells empty.
	peerSidesEnv = "DBKEEPER_PEER_SIDES"

	// The operators, as the log lines and the table name them.
	peerDBKeeper = "dbkeeper"
	peerCNPG     = "CloudNativePG"

	// peerCutFault is the fault the primary is not lost to (its standbys
	// still see it): measured as the longest write gap, not loss→write.
	peerCutFault = "cut-from-api-server"
	// peerVolumeSize is each instance's volume on both sides, startHA's.
	peerVolumeSize = "768Mi"
	// peerConvergeTimeout bounds CloudNativePG's outage and its return to
	// health: convergeTimeout, plus the 180 s its instance manager gives a
	// deleted primary's connected clients (smartShutdownTimeout) before it
	// shuts down fast.
	peerConvergeTimeout = convergeTimeout + 3*time.Minute
	// peerRunBudget is the time a run may take at most: no run starts
	// with less left before the test's deadline, so that the table is
	// still written.
	peerRunBudget = 12 * time.Minute
)

// peerFaults are the faults of the comparison on one node, by their
// names in faultKinds.
var peerFaults = []string{"pod-deleted", "pod-deleted-grace-0", "postmaster-sigkill", "agent-sigkill", "frozen", peerCutFault}

// peerNodeFaults are the faults of the comparison on several nodes (build
// tag nodes), by their names in extraFaultKinds (node-drained, a planned
// change, is TestNodeFaults' own): the primary's node drained, powered
// off, and cut off from the other nodes and the API server.
var peerNodeFaults = []string{peerDrainFault, "node-powered-off", "node-isolated", peerOperatorNodeFault}

// peerOperatorNodeFault is the node of the leading operator replica and
// of the primary powered off together: each side's operator runs two
// replicas with leader election (a Lease of 15 s on both), dbkeeper's
// installed with its chart (TestNodeOfTheOperator's run), and the
// primary is switched over onto the leader's node first.
const peerOperatorNodeFault = "operator-node-powered-off"

// peerDrainFault is `kubectl drain` of the primary's node: its measure is
// the longest write gap from the drain's start until the Database is
// whole again (the node uncordoned, its pods back).
const peerDrainFault = "node-drained"

// peerDrainTimeout bounds a drain on either side: a primary's budget
// blocks its eviction until the operator moved the primary away.
const peerDrainTimeout = 5 * time.Minute

// peerDefaultFaults are the faults compared by default: the node faults
// on several nodes, the pod and process faults on one.
func peerDefaultFaults() []string {
	if realNodes > 1 {
		return peerNodeFaults
	}
	return peerFaults
}

// TestFailoverPeerCloudNativePG measures, for each fault of peerFaults,
// DBKEEPER_PEER_RUNS times on each side, how long after the fault writes
// through the read-write Service are accepted again (loss→write; for the
// cut from the API server, the longest write gap), logs a MEASURED line
// per run and ends with a markdown table of p50 and max per side
// (written to DBKEEPER_PEER_TABLE when set). dbkeeper's runs keep every
// assertion of the failover suite; CloudNativePG's are measured, and what
// they lose is reported, not asserted. Nothing is skipped: a missing
// piece (the go command, umoci, skopeo, ctr, an image) fails the test.
func TestFailoverPeerCloudNativePG(t *testing.T) {
	ctx := context.Background()
	runs := peerRuns(t)
	names := peerFaultNames(t)
	kinds := map[string]faultKind{}
	for _, k := range append(slices.Clone(faultKinds), extraFaultKinds...) {
		kinds[k.name] = k
	}
	for _, n := range names {
		if n != peerDrainFault && n != peerOperatorNodeFault {
			require.Contains(t, kinds, n, "fault %s of the comparison is not among the failover suite's faultKinds", n)
		}
	}
	pgImage := local.Images["postgres:17"]
	require.NotEmpty(t, pgImage, "the real node has no postgres:17 image")

	start := time.Now()
	img, err := cnpg.Build(ctx, func(s string) { t.Log("cnpg: " + s) })
	require.NoError(t, err)
	t.Logf("cnpg: operator image %s ready in %s", img.Ref, time.Since(start).Round(time.Millisecond))
	require.NoError(t, cnpg.Install(ctx, local, img, cnpg.InstallOptions{Say: func(s string) { t.Log("cnpg: " + s) }}))

	res := cnpg.NewResults([]string{peerDBKeeper, peerCNPG}, names)
	// gaps: the longest time without an acknowledged write since the
	// fault (a CloudNativePG primary deleted with clients connected serves
	// on for up to 180 s first: loss→write alone would hide that)
	gaps := cnpg.NewResults([]string{peerDBKeeper, peerCNPG}, names)
	side := os.Getenv(peerSidesEnv)
	require.Contains(t, []string{"", peerDBKeeper, peerCNPG}, side, "%s names a side: %s or %s", peerSidesEnv, peerDBKeeper, peerCNPG)
	// the operator's node is a fault of its own set-up on dbkeeper's side
	// (the chart's two manager replicas, not the test process's operator)
	ordinary := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == peerOperatorNodeFault })
	var dbNamespace string
	t.Run(peerDBKeeper, func(t *testing.T) {
		if side == peerCNPG {
			t.Skipf("%s=%s: CloudNativePG's side only", peerSidesEnv, side)
		}
		if len(ordinary) == 0 {
			t.Skip("no fault of the test process's operator to run")
		}
		h := startHA(t, "peer", true)
		dbNamespace = h.db.Namespace
		outer := h.t
		defer func() { h.t = outer }()
		peerRunAll(t, res, peerDBKeeper, ordinary, runs, func(t *testing.T, fault string, i int) {
			// each run in a subtest of its own (ha.run asserts through
			// h.t): a failed run ends, the next one starts from
			// converged
			h.t = t
			before := len(h.measured[fault])
			defer func() {
				if len(h.measured[fault]) > before {
					d := h.measured[fault][len(h.measured[fault])-1]
					res.Add(peerDBKeeper, fault, d)
					gaps.Add(peerDBKeeper, fault, h.w.LongestGap(h.faultAt))
					t.Logf("MEASURED peer %s %s run %d: loss→write %s%s", peerDBKeeper, fault, i, d.Round(time.Millisecond), peerMetricNote(fault))
				}
			}()
			if fault == peerDrainFault {
				h.drainPrimaryNode(i)
				return
			}
			h.run(kinds[fault], i)
		})
	})
	if dbNamespace != "" {
		peerWaitNamespaceGone(t, dbNamespace)
	}
	if len(ordinary) < len(names) {
		t.Run(peerDBKeeper+"-"+peerOperatorNodeFault, func(t *testing.T) {
			if side == peerCNPG {
				t.Skipf("%s=%s: CloudNativePG's side only", peerSidesEnv, side)
			}
			dbNamespace = peerOperatorNodeRuns(t, res, gaps, runs)
		})
		peerWaitNamespaceGone(t, dbNamespace)
	}
	t.Run(peerCNPG, func(t *testing.T) {
		if side == peerDBKeeper {
			t.Skipf("%s=%s: dbkeeper's side only", peerSidesEnv, side)
		}
		p := startPeerCNPG(t, pgImage)
		peerRunAll(t, res, peerCNPG, names, runs, func(t *testing.T, fault string, i int) {
			p.t = t
			p.run(res, gaps, fault, i)
		})
	})

	table := peerTable(res, gaps, runs)
	t.Log("\n" + table)
	if path := os.Getenv(peerTableEnv); path != "" {
		require.NoError(t, os.WriteFile(path, []byte(table), 0o644), "writing the table")
		t.Logf("the table is in %s", path)
	}
}

// peerOperatorNodeRuns is dbkeeper's side of peerOperatorNodeFault:
// the chart's two manager replicas on distinct nodes watching a
// namespace of their own, the failover suite's Database there, and runs
// of TestNodeOfTheOperator's fault; it returns the Database's namespace.
func peerOperatorNodeRuns(t *testing.T, res, gaps *cnpg.Results, runs int) string {
	system, apps := newNamespace(t), newNamespace(t)
	helmInstall(t, system, apps)
	managers := &corev1.PodList{}
	require.NoError(t, k8s.List(context.Background(), managers, client.InNamespace(system), client.MatchingLabels{"app.kubernetes.io/name": "dbkeeper"}))
	require.Len(t, managers.Items, 2, "the chart's two manager replicas")
	require.NotEqual(t, managers.Items[0].Spec.NodeName, managers.Items[1].Spec.NodeName, "the manager replicas share a node")
	h := startHAIn(t, apps, "peeropnode", true, nil)
	outer := h.t
	defer func() { h.t = outer }()
	peerRunAll(t, res, peerDBKeeper, []string{peerOperatorNodeFault}, runs, func(t *testing.T, fault string, i int) {
		h.t = t
		before := len(h.measured[fault])
		h.operatorNodePoweredOff(system, i)
		if len(h.measured[fault]) > before {
			d := h.measured[fault][len(h.measured[fault])-1]
			res.Add(peerDBKeeper, fault, d)
			gaps.Add(peerDBKeeper, fault, h.w.LongestGap(h.faultAt))
			t.Logf("MEASURED peer %s %s run %d: loss→write %s", peerDBKeeper, fault, i, d.Round(time.Millisecond))
		}
	})
	return apps
}

// peerRuns is DBKEEPER_PEER_RUNS, 5 when unset.
func peerRuns(t *testing.T) int {
	v := os.Getenv(peerRunsEnv)
	if v == "" {
		return 5
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "%s=%q", peerRunsEnv, v)
	require.Positive(t, n, "%s=%q", peerRunsEnv, v)
	return n
}

// peerFaultNames is peerFaults, or those DBKEEPER_PEER_FAULTS lists.
func peerFaultNames(t *testing.T) []string {
	v := os.Getenv(peerFaultsEnv)
	if v == "" {
		return peerDefaultFaults()
	}
	names := strings.Split(v, ",")
	all := append(slices.Clone(peerFaults), peerNodeFaults...)
	for _, n := range names {
		require.Contains(t, all, n, "%s=%q: %s is not a fault of the comparison %v", peerFaultsEnv, v, n, all)
	}
	return names
}

// peerRunAll runs each fault runs times on one side, each run a subtest,
// recording a failed run; it starts no run with less than peerRunBudget
// left before the test's deadline, and fails the test for the runs it
// did not start.
func peerRunAll(t *testing.T, res *cnpg.Results, operator string, faults []string, runs int, run func(t *testing.T, fault string, i int)) {
	deadline, hasDeadline := t.Deadline()
	for _, fault := range faults {
		for i := 1; i <= runs; i++ {
			if hasDeadline && time.Until(deadline) < peerRunBudget {
				res.NotRun(operator, fault, runs-i+1)
				t.Errorf("%s %s: runs %d to %d not run: less than %s left before the test's deadline", operator, fault, i, runs, peerRunBudget)
				break
			}
			if !t.Run(fmt.Sprintf("%s-run-%d", fault, i), func(t *testing.T) { run(t, fault, i) }) {
				res.Failed(operator, fault)
			}
		}
	}
}

// peerMetricNote says what a fault's measure is when it is not
// loss→write.
func peerMetricNote(fault string) string {
	switch fault {
	case peerCutFault:
		return " (the longest write gap from the cut to 1 s after it healed: the primary need not be lost)"
	case peerDrainFault:
		return " (the longest write gap from the drain's start until the Database is whole again, its node back)"
	}
	return ""
}

// peerGapFault says whether a fault is measured by its longest write gap
// (the primary need not be lost) rather than loss→write.
func peerGapFault(fault string) bool { return fault == peerCutFault || fault == peerDrainFault }

// peerWaitNamespaceGone waits until dbkeeper's namespace is gone (its
// pods stopped), so that CloudNativePG's runs have the node to
// themselves; it says so when it is not.
func peerWaitNamespaceGone(t *testing.T, namespace string) {
	gone := func() bool {
		err := k8s.Get(context.Background(), client.ObjectKey{Name: namespace}, &corev1.Namespace{})
		return apierrors.IsNotFound(err)
	}
	start := time.Now()
	for !gone() && time.Since(start) < timeout {
		time.Sleep(time.Second)
	}
	if gone() {
		t.Logf("namespace %s of dbkeeper's Database gone %s after its runs", namespace, time.Since(start).Round(time.Second))
		return
	}
	t.Logf("namespace %s of dbkeeper's Database still there %s after its runs: CloudNativePG's runs share the node with what is left of it", namespace, timeout)
}

// peerTable is the comparison as markdown: what each side ran with, the
// table, how to read it.
func peerTable(res, gaps *cnpg.Results, runs int) string {
	var b strings.Builder
	command := "make bench-failover"
	if realNodes > 1 {
		command += " NODES=3"
	}
	fmt.Fprintf(&b, "Failover side by side on %d real node(s), %s, %d runs per fault and side (%s).\n\n",
		realNodes, time.Now().UTC().Format("2006-01-02"), runs, command)
	b.WriteString("Fault → first acknowledged write after the outage (loss→write):\n\n")
	b.WriteString(res.Markdown(func(fault string) string {
		if peerGapFault(fault) {
			return fault + " (longest write gap)"
		}
		return ""
	}))
	b.WriteString("\nLongest time without an acknowledged write since the fault (writes unavailable):\n\n")
	b.WriteString(gaps.Markdown(func(string) string { return "" }))
	fmt.Fprintf(&b, `
Both sides: %d instances of the project's PostgreSQL 17 image, volumes of storage class %q of %s, synchronous
replication ANY 1 with required durability, one writer (test/framework/dbtest, %s client timeout per connection
and INSERT, one connection kept across INSERTs) through the read-write Service's ClusterIP with verify-full TLS,
the same faults (test/framework/faults), each side alone on the node.

- dbkeeper: the failover suite's Database (startHA): failoverDelay %s; operator in the test process, no resource
  limits; a second writer straight to the old primary's pod during each run; every assertion of ha.run.
- CloudNativePG %s (built from the module proxy): failoverDelay 0 (its default), failoverQuorum false (its default),
  smartShutdownTimeout 180 s and stopDelay 1800 s (its defaults: a deleted primary waits up to 180 s for connected
  clients), probes and the liveness isolation check at its defaults, its operator's resource limits removed
  (requests kept); "agent-sigkill" kills its instance manager (PID 1 of the "postgres" container).

loss→write: from the fault to the first write acknowledged after the longest gap of writes that follows it.
p50 is the nearest-rank median. "failed": a run whose checks failed (dbkeeper) or whose writes did not come back
or whose Cluster did not become healthy again in time (CloudNativePG); "acknowledged writes lost": ids the writer
had seen committed that were missing afterwards.
`, haInstances, cluster.SizedStorageClassName, peerVolumeSize, writeTimeout, haFailoverDelay, cnpg.Version)
	return b.String()
}

// peerCluster is the CloudNativePG side: its Cluster, writer and injector.
type peerCluster struct {
	t   *testing.T
	cl  *cnpg.Cluster
	rw  sqlconn.Target
	w   *dbtest.Writer
	inj *faults.Injector
	// lost are the acknowledged ids already found missing (and counted).
	lost map[string]bool
	// healedAt is when the last node fault healed.
	healedAt time.Time
}

// startPeerCNPG creates the Cluster, waits until it is healthy with its
// standbys attached, checks that the fault injector finds the instance
// manager and the postmaster in its pods, and starts the writer.
func startPeerCNPG(t *testing.T, pgImage string) *peerCluster {
	t.Helper()
	ctx := context.Background()
	ns := newNamespace(t)
	created := time.Now()
	cl, err := cnpg.CreateCluster(ctx, k8s, cnpg.ClusterOptions{
		Namespace: ns, Name: "peer", Instances: haInstances, ImageName: pgImage,
		StorageClass: cluster.SizedStorageClassName, Size: peerVolumeSize, Synchronous: true,
	})
	require.NoError(t, err)
	_, err = cl.WaitHealthy(ctx, peerConvergeTimeout)
	require.NoError(t, err)
	t.Logf("CloudNativePG Cluster %s/%s of %d instances healthy %s after its creation", ns, cl.Name, haInstances, time.Since(created).Round(100*time.Millisecond))
	rw, err := cl.AppTarget(ctx)
	require.NoError(t, err)
	p := &peerCluster{t: t, cl: cl, rw: rw, inj: faults.New(k8s).ForContainer(cnpg.PostgresContainer), lost: map[string]bool{}}
	primary := p.converged()
	procs, err := p.inj.Processes(ctx, ns, primary)
	require.NoError(t, err)
	t.Log(procs.Describe())
	require.NotZero(t, procs.Agent, "PID 1 of %s's %s container", primary, cnpg.PostgresContainer)
	require.Contains(t, faults.Cmdline(procs.Agent), "instance", "PID 1 is the instance manager")
	require.NotZero(t, procs.Postmaster, "the postmaster, a child of the instance manager")
	t.Logf("synchronous_standby_names on %s: %s", primary, sqlValue(t, rw, "SHOW synchronous_standby_names"))
	p.w, err = dbtest.StartWriterWithTimeout(ctx, rw, "acks", writeTimeout)
	require.NoError(t, err)
	t.Cleanup(p.w.Stop)
	return p
}

// converged waits until the Cluster is healthy (cnpg.Status.Healthy)
// and its primary, through the read-write Service, takes writes and has
// a WAL sender for every standby; it returns the primary.
func (p *peerCluster) converged() string {
	t := p.t
	t.Helper()
	s, err := p.cl.WaitHealthy(context.Background(), peerConvergeTimeout)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		// pg_stat_replication shows every WAL sender's row to any user
		// (its details only to privileged ones)
		v, err := sqlOnce(p.rw, "SELECT CASE WHEN pg_is_in_recovery() THEN 'standby' ELSE 'primary' END || ' ' || (SELECT count(*) FROM pg_stat_replication)")
		if assert.NoError(ct, err) {
			assert.Equal(ct, fmt.Sprintf("primary %d", haInstances-1), v, "a primary with a WAL sender per standby")
		}
	}, peerConvergeTimeout, 250*time.Millisecond)
	return s.CurrentPrimary
}

// pod reads one of the Cluster's pods.
func (p *peerCluster) pod(name string) *corev1.Pod {
	pod := &corev1.Pod{}
	require.NoError(p.t, k8s.Get(context.Background(), client.ObjectKey{Namespace: p.cl.Namespace, Name: name}, pod))
	return pod
}

// run injects one fault into the current primary and measures, as ha.run
// does, when writes through <name>-rw are accepted again; then it waits
// for the Cluster to be whole, and counts the acknowledged ids lost.
func (p *peerCluster) run(res, gaps *cnpg.Results, fault string, i int) {
	t := p.t
	t.Helper()
	ctx := context.Background()
	if fault == peerOperatorNodeFault {
		p.primaryOntoOperatorLeader()
	}
	old := p.converged()
	oldPod := p.pod(old)
	// a second writer straight to the old primary's pod, past the
	// Service, as ha.run's: what the old primary itself still takes
	direct := p.rw
	direct.Host = oldPod.Status.PodIP
	fenceTable := fmt.Sprintf("fence_%s_%d", strings.ReplaceAll(fault, "-", "_"), i)
	fence, err := dbtest.StartWriterWithTimeout(ctx, direct, fenceTable, writeTimeout)
	require.NoError(t, err)
	defer fence.Stop()
	acks, fenceAcks := p.w.AckCount(), fence.AckCount()
	require.Eventually(t, func() bool { return p.w.AckCount() > acks+20 && fence.AckCount() > fenceAcks+20 },
		timeout, 20*time.Millisecond, "both writers write before the fault")

	if strings.HasPrefix(fault, "node-") {
		p.keepOperatorOff(oldPod.Spec.NodeName)
	}
	at := time.Now()
	t.Logf("fault %s run %d: primary %s on %s", fault, i, old, oldPod.Spec.NodeName)
	var heal, healLater func() error
	var healAfter time.Duration
	switch fault {
	case "node-powered-off", peerOperatorNodeFault:
		on, err := p.inj.Nodes(theNode).PowerOff(oldPod.Spec.NodeName)
		require.NoError(t, err)
		t.Cleanup(func() { _ = on() })
		healLater = on
	case peerDrainFault:
		// its primary's budget (minAvailable 1) refuses the eviction
		// until its operator, seeing the node unschedulable, switched
		// over
		dctx, cancel := context.WithTimeout(ctx, peerDrainTimeout)
		uncordon, err := p.inj.Nodes(theNode).Drain(dctx, oldPod.Spec.NodeName)
		cancel()
		if uncordon != nil {
			t.Cleanup(func() { _ = uncordon() })
			healLater = uncordon
		}
		require.NoError(t, err, "draining %s", oldPod.Spec.NodeName)
		t.Logf("fault %s run %d: drain done %s after it started", fault, i, time.Since(at).Round(time.Millisecond))
	case "node-isolated":
		undo, err := p.inj.Nodes(theNode).Isolate(ctx, oldPod.Spec.NodeName)
		require.NoError(t, err)
		t.Cleanup(func() { _ = undo() })
		healLater = undo
	case "pod-deleted":
		require.NoError(t, k8s.Delete(ctx, oldPod))
	case "pod-deleted-grace-0":
		require.NoError(t, k8s.Delete(ctx, oldPod, client.GracePeriodSeconds(0)))
	case "postmaster-sigkill":
		_, err := p.inj.KillPostmaster(ctx, p.cl.Namespace, old)
		require.NoError(t, err)
	case "agent-sigkill":
		_, err := p.inj.KillAgent(ctx, p.cl.Namespace, old)
		require.NoError(t, err)
	case "frozen":
		thaw, err := p.inj.Freeze(ctx, p.cl.Namespace, old)
		require.NoError(t, err)
		t.Cleanup(func() { _ = thaw() })
		heal, healAfter = thaw, freezeFor
	case peerCutFault:
		_, undo, err := p.inj.CutFromAPIServer(ctx, oldPod.Status.PodIP)
		require.NoError(t, err)
		t.Cleanup(func() { _ = undo() })
		heal, healAfter = undo, cutFor
	default:
		require.FailNow(t, "no CloudNativePG injection", "for fault %s", fault)
	}
	if heal != nil {
		time.Sleep(time.Until(at.Add(healAfter)))
		require.NoError(t, heal())
		t.Logf("fault %s run %d: healed %s after the fault", fault, i, time.Since(at).Round(time.Millisecond))
	}

	// d is the measure, gap the longest write gap it saw
	var d, gap time.Duration
	detail := ""
	if peerGapFault(fault) {
		time.Sleep(time.Second)
		d = p.w.LongestGap(at)
		gap = d
	} else {
		var stopped, resumed time.Time
		require.Eventually(t, func() bool {
			stopped, resumed = p.w.Outage(at)
			return !resumed.IsZero() && resumed.Sub(stopped) >= 500*time.Millisecond && time.Since(resumed) > time.Second
		}, peerConvergeTimeout, 50*time.Millisecond, "writes through %s stop after %s, then are accepted again", p.cl.WriteService(), fault)
		d, gap = resumed.Sub(at), resumed.Sub(stopped)
		detail = fmt.Sprintf(" (writes unavailable %s, from %s after the fault)", resumed.Sub(stopped).Round(time.Millisecond), stopped.Sub(at).Round(time.Millisecond))
	}
	measured := func() {
		res.Add(peerCNPG, fault, d)
		gaps.Add(peerCNPG, fault, gap)
		t.Logf("MEASURED peer %s %s run %d: loss→write %s%s%s", peerCNPG, fault, i, d.Round(time.Millisecond), detail, peerMetricNote(fault))
	}
	if fault != peerDrainFault {
		measured()
	}

	if healLater != nil {
		require.NoError(t, healLater())
		p.healedAt = time.Now()
	}
	// what the old primary took after the fault, straight to its pod
	if last, ok := fence.LastAck(); ok && last.After(at) {
		t.Logf("fault %s run %d: the old primary %s acknowledged its last direct write %s after the fault", fault, i, old, last.Sub(at).Round(time.Millisecond))
	}
	fence.Stop()
	primary := p.converged()
	if fault == peerOperatorNodeFault {
		leader, err := cnpg.OperatorLeader(ctx, k8s)
		require.NoError(t, err)
		if assert.NotNil(t, leader, "an operator replica leads") {
			t.Logf("fault %s run %d: the operator replica %s on %s leads", fault, i, leader.Name, leader.Spec.NodeName)
		}
	}
	if primary == old {
		t.Logf("fault %s run %d: %s kept its role (no failover)", fault, i, old)
	} else {
		t.Logf("fault %s run %d: failover %s → %s", fault, i, old, primary)
	}
	if fault == peerDrainFault {
		// as dbkeeper's: until the Cluster is whole again, the node back
		d = p.w.LongestGap(at)
		gap = d
		measured()
	}
	if later := p.w.LongestGap(at); later > gap {
		t.Logf("fault %s run %d: a longer write gap (%s) came after the one measured, before the Cluster was whole again", fault, i, later.Round(time.Millisecond))
	}
	lost := p.missing(p.w, "acks") + p.missing(fence, fenceTable)
	if lost > 0 {
		res.Lost(peerCNPG, fault, lost)
		t.Logf("fault %s run %d: %d acknowledged writes lost, with synchronous replication (dataDurability required)", fault, i, lost)
	}
}

// missing counts the acknowledged ids of w not in table (read through
// <name>-rw) that were not counted before, and logs them.
func (p *peerCluster) missing(w *dbtest.Writer, table string) int {
	ids, err := w.Missing(context.Background(), p.rw)
	require.NoError(p.t, err, "reading %s", table)
	var fresh []int64
	for _, id := range ids {
		key := table + "/" + strconv.FormatInt(id, 10)
		if !p.lost[key] {
			p.lost[key] = true
			fresh = append(fresh, id)
		}
	}
	slices.Sort(fresh)
	for _, id := range fresh {
		at, _ := w.AckedAt(id)
		by, _ := w.AckedBy(id)
		p.t.Logf("acknowledged id %d of %s missing: acknowledged at %s by %s", id, table, at.Format("15:04:05.000"), by)
	}
	return len(fresh)
}

// keepOperatorOff moves CloudNativePG's operator off node before a node
// fault (a nodeSelector on another node, then a wait until it is
// Available there): dbkeeper's operator runs in the test process, on no
// node, so a fault of the primary's node must not take CloudNativePG's
// with it (the operator's node lost is a fault of its own).
func (p *peerCluster) keepOperatorOff(node string) {
	t := p.t
	t.Helper()
	ctx := context.Background()
	pods := &corev1.PodList{}
	require.NoError(t, k8s.List(ctx, pods, client.InNamespace(cnpg.OperatorNamespace)))
	on := false
	for _, pod := range pods.Items {
		on = on || (pod.Spec.NodeName == node && pod.DeletionTimestamp == nil)
	}
	if !on {
		return
	}
	var other string
	for _, n := range theNode.Nodes() {
		if n.Name != node {
			other = n.Name
			break
		}
	}
	d := &appsv1.Deployment{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: cnpg.OperatorNamespace, Name: cnpg.OperatorDeployment}, d))
	patch := client.MergeFrom(d.DeepCopy())
	// one replica (peerOperatorNodeFault's runs leave two, on distinct
	// nodes, which one node cannot hold)
	d.Spec.Replicas = ptr.To[int32](1)
	d.Spec.Template.Spec.Affinity = nil
	d.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: other}
	require.NoError(t, k8s.Patch(ctx, d, patch))
	require.Eventually(t, func() bool {
		require.NoError(t, k8s.List(ctx, pods, client.InNamespace(cnpg.OperatorNamespace)))
		for _, pod := range pods.Items {
			if pod.Spec.NodeName == node || pod.DeletionTimestamp != nil || !podReady(&pod) {
				return false
			}
		}
		return len(pods.Items) > 0
	}, timeout, 250*time.Millisecond, "CloudNativePG's operator moved from %s to %s", node, other)
	t.Logf("CloudNativePG's operator moved from %s to %s before the fault of its node", node, other)
}

// primaryOntoOperatorLeader readies peerOperatorNodeFault on
// CloudNativePG's side: its operator at two replicas on distinct nodes,
// and the Cluster's primary on the node of the replica that leads (a
// switchover, as kubectl cnpg promote asks for one, when it is not).
func (p *peerCluster) primaryOntoOperatorLeader() {
	t := p.t
	t.Helper()
	ctx := context.Background()
	require.NoError(t, cnpg.SetOperatorReplicas(ctx, k8s, 2, timeout))
	waitReplicasSettled(t, "CloudNativePG's operator", p.healedAt, func() ([]corev1.Pod, error) { return cnpg.OperatorPods(ctx, k8s) })
	var leader *corev1.Pod
	require.Eventually(t, func() bool {
		l, err := cnpg.OperatorLeader(ctx, k8s)
		require.NoError(t, err)
		leader = l
		return l != nil && podReady(l)
	}, timeout, 250*time.Millisecond, "a Ready CloudNativePG operator replica holds the Lease %s", cnpg.LeaderElectionLease)
	node := leader.Spec.NodeName
	primary := p.converged()
	if p.pod(primary).Spec.NodeName != node {
		pods := &corev1.PodList{}
		require.NoError(t, k8s.List(ctx, pods, client.InNamespace(p.cl.Namespace), client.MatchingLabels{"cnpg.io/cluster": p.cl.Name, "cnpg.io/podRole": "instance"}))
		var target string
		for _, pod := range pods.Items {
			if pod.Spec.NodeName == node {
				target = pod.Name
			}
		}
		require.NotEmpty(t, target, "no instance of the Cluster on the operator leader's node %s", node)
		require.NoError(t, p.cl.Switchover(ctx, target))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			s, err := p.cl.Status(ctx)
			if assert.NoError(c, err) {
				assert.Equal(c, target, s.CurrentPrimary)
			}
		}, peerConvergeTimeout, 250*time.Millisecond, "CloudNativePG switched over to %s", target)
	}
	t.Logf("the leading operator replica %s and the primary %s on %s", leader.Name, p.converged(), node)
}
