package realnode

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/cluster"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
	"github.com/dbkeeper/dbkeeper/test/framework/faults"
	"github.com/dbkeeper/dbkeeper/test/framework/realnode"
)

// TestFaultHelpers checks each fault of test/framework/faults on real
// instances, for what it must do whatever the operator does about it: the
// processes found are the agent, the postmaster and the walreceiver; a
// paused walreceiver stops the standby receiving WAL and resumes it; a
// frozen container answers nothing until thawed; a SIGKILL of the
// postmaster or of the agent restarts the container; the cut keeps a pod
// from the API server (and nothing else) until undone; a filled volume
// refuses a write that needs space until freed, losing no acknowledged one.
// The Database replicates asynchronously (the default), so a kill that
// makes it fail over may lose the last acknowledged writes: exactly as
// many as status.replication.lastFailover says the old primary discarded.
func TestFaultHelpers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns)
	db := newDatabase(ns, "faulty", "17", func(d *dbv1.Database) {
		d.Spec.Replicas = ptr.To[int32](2)
		d.Spec.Storage.StorageClassName = ptr.To(cluster.SizedStorageClassName)
		d.Spec.Storage.Size = ptr.To(resourceQuantity("512Mi"))
	})
	create(t, db)
	waitReady(t, db)
	p0, p1 := resources.InstanceName(db, 0), resources.InstanceName(db, 1)
	waitTopology(t, db, p0, 2)
	inj := faults.New(k8s)
	rw := serviceTarget(t, db, resources.ClientServiceName(db))
	w, err := dbtest.StartWriterWithTimeout(ctx, rw, "acks", 5*time.Second)
	require.NoError(t, err)
	defer w.Stop()

	t.Log("the processes of each engine container")
	primary, err := inj.Processes(ctx, ns, p0)
	require.NoError(t, err)
	t.Log(primary.Describe())
	assert.NotZero(t, primary.Agent, "the primary's agent")
	assert.Contains(t, procCmdline(primary.Agent), "agent", "PID 1 is the agent")
	assert.NotZero(t, primary.Postmaster, "the primary's postmaster")
	assert.Zero(t, primary.WALReceiver, "a primary has no walreceiver")
	standby, err := inj.Processes(ctx, ns, p1)
	require.NoError(t, err)
	t.Log(standby.Describe())
	assert.NotZero(t, standby.WALReceiver, "the standby's walreceiver")

	t.Log("PauseWALReceiver: the standby stops receiving while the primary writes")
	st := podTarget(t, db, p1)
	received := "SELECT pg_last_wal_receive_lsn()::text"
	resume, err := inj.PauseWALReceiver(ctx, ns, p1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resume() })
	before := sqlValue(t, st, received)
	acks := w.AckCount()
	require.Eventually(t, func() bool { return w.AckCount() > acks+50 }, timeout, 50*time.Millisecond, "the primary takes writes")
	assert.Equal(t, before, sqlValue(t, st, received), "a paused walreceiver receives nothing")
	require.NoError(t, resume())
	require.Eventually(t, func() bool { v, err := sqlOnce(st, received); return err == nil && v != before },
		timeout, 100*time.Millisecond, "the resumed walreceiver receives again")

	t.Log("Freeze: every process of the standby stopped, nothing answers, until thawed")
	thaw, err := inj.Freeze(ctx, ns, p1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = thaw() })
	frozen, err := inj.Processes(ctx, ns, p1)
	require.NoError(t, err)
	for _, pid := range frozen.Pids {
		// a process that exited as its parent was stopped stays a zombie
		// (Z) until the thaw: it runs nothing either
		assert.Contains(t, []string{"T", "t", "Z"}, procState(pid), "pid %d (%s) stopped", pid, procCmdline(pid))
	}
	_, err = sqlWithin(st, "SELECT 1", 3*time.Second)
	assert.Error(t, err, "a frozen instance does not answer")
	require.NoError(t, thaw())
	for _, pid := range frozen.Pids {
		assert.NotContains(t, []string{"T", "t"}, procState(pid), "pid %d (%s) continued", pid, procCmdline(pid))
	}
	assert.Equal(t, "1", sqlValue(t, st, "SELECT 1"), "a thawed instance answers")

	// discarded sums lastFailover.discardedTransactions over the failovers
	// the kills cause (each read before the next kill can replace it)
	var discarded int64
	failovers := map[string]bool{}
	record := func() {
		if lf := failedOver(t, db); lf != nil && !failovers[lf.StartedAt.String()] {
			failovers[lf.StartedAt.String()] = true
			discarded += *lf.DiscardedTransactions
			t.Logf("failed over from %s to %s (%s): %d transactions discarded, %d bytes lost", lf.From, lf.To, lf.Reason, *lf.DiscardedTransactions, lf.LostBytes)
		}
	}
	for _, kill := range []struct {
		name string
		do   func(context.Context, string, string) (int, error)
	}{{"postmaster", inj.KillPostmaster}, {"agent", inj.KillAgent}} {
		// the first kill may make the Database fail over (see below)
		victim := waitTopology(t, db, "", 2).Status.Replication.CurrentPrimary
		t.Logf("SIGKILL of the primary's (%s) %s: the container restarts", victim, kill.name)
		restarts := restartCount(t, db, victim)
		pid, err := kill.do(ctx, ns, victim)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return !procAlive(pid) }, 10*time.Second, 20*time.Millisecond, "pid %d gone", pid)
		require.Eventually(t, func() bool { return restartCount(t, db, victim) > restarts }, timeout, 200*time.Millisecond,
			"the engine container of %s restarted after the SIGKILL of its %s", victim, kill.name)
		waitReady(t, db)
		acks := w.AckCount()
		require.Eventually(t, func() bool { return w.AckCount() > acks+10 }, timeout, 50*time.Millisecond, "writes resume")
		record()
	}

	t.Log("CutFromAPIServer: a probe pod reaches the API server until cut, and again after")
	probe := apiProbe(t, ns)
	waitProbe(t, probe, "ok")
	cut, undo, err := inj.CutFromAPIServer(ctx, probe.Status.PodIP)
	require.NoError(t, err)
	t.Cleanup(func() { _ = undo() })
	t.Logf("cut %s from %s (table %s)", cut.PodIP, cut.APIServer, cut.Table)
	waitProbe(t, probe, "cut")
	dropped, err := cut.Dropped()
	require.NoError(t, err)
	assert.Positive(t, dropped, "the cut's counters count the probe's packets")
	require.NoError(t, undo())
	waitProbe(t, probe, "ok")

	// the kills above may have made the Database fail over (the second
	// restart waits out the kubelet's back-off, longer than the Lease and
	// failoverDelay: CI saw the fill below hit the former primary's volume
	// while the bulk insert ran on p1's): the faults below go to whichever
	// instance is primary now
	primaryNow := waitTopology(t, db, "", 2).Status.Replication.CurrentPrimary
	t.Logf("CutFromAPIServer on the primary (%s): its clients are untouched", primaryNow)
	_, undoPrimary, err := inj.CutFromAPIServer(ctx, getPod(t, db, primaryNow).Status.PodIP)
	require.NoError(t, err)
	t.Cleanup(func() { _ = undoPrimary() })
	acks = w.AckCount()
	require.Eventually(t, func() bool { return w.AckCount() > acks+50 }, timeout, 50*time.Millisecond, "writes go on")
	require.NoError(t, undoPrimary())

	t.Log("FillVolume on the primary: a write that needs space fails until the file is removed, nothing acknowledged is lost")
	// a small insert may still fit in a page or a WAL segment the server
	// allocated before the fill (CI saw the writer go on for 3 min): the
	// check is a statement that needs new space: 100,000 rows, several MB
	// of table pages (the full volume refuses its temporary file first)
	const bulk = "INSERT INTO bulk SELECT md5(random()::text) FROM generate_series(1, 100000)"
	_, err = sqlWithin(rw, "CREATE TABLE bulk (b text)", 30*time.Second)
	require.NoError(t, err)
	// a checkpoint frees WAL segments when it ends, and a spread one
	// (the restart above starts one) may end in the middle of the insert
	// below, freeing more than the top-up takes back in time: CI saw the
	// insert succeed on a full volume. CHECKPOINT ends it now, before
	// the fill; the next one is checkpoint_timeout (5 min) away.
	_, err = sqlWithin(podTarget(t, db, primaryNow), "CHECKPOINT", time.Minute)
	require.NoError(t, err)
	free, err := inj.Free(ctx, ns, primaryNow)
	require.NoError(t, err)
	unfill, err := inj.FillVolume(ctx, ns, primaryNow)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unfill() })
	after, err := inj.Free(ctx, ns, primaryNow)
	require.NoError(t, err)
	t.Logf("the primary's volume had %d bytes free, %d after FillVolume", free, after)
	// the server may free a page between the fill and the look
	assert.LessOrEqual(t, after, int64(8192), "the volume is full: not one PostgreSQL page left")
	_, err = sqlWithin(rw, bulk, time.Minute)
	require.Error(t, err, "a write of several MB on a full volume")
	assert.Contains(t, err.Error(), "No space left on device")
	t.Logf("on the full volume: %v", err)
	acks = w.AckCount()
	require.NoError(t, unfill())
	require.Eventually(t, func() bool {
		_, err := sqlWithin(rw, bulk, time.Minute)
		return err == nil
	}, 2*timeout, time.Second, "the write of several MB once the volume is freed")
	require.Eventually(t, func() bool { return w.AckCount() > acks+10 }, 2*timeout, 100*time.Millisecond, "the writer goes on once freed")
	w.Stop()
	missing, err := w.Missing(ctx, rw)
	require.NoError(t, err)
	record()
	// one INSERT may be in flight (committed, never acknowledged) at the
	// failover: status counts it, the writer does not
	t.Logf("acknowledged ids lost: %v; transactions discarded by failovers per status: %d", missing, discarded)
	assert.LessOrEqual(t, int64(len(missing)), discarded, "acknowledged ids lost beyond what lastFailover.discardedTransactions reports")
}

// failedOver returns status.replication.lastFailover once its old primary
// rejoined and status says what it discarded, or nil when the Database
// never failed over or the failover was abandoned (the killed primary came
// back holding its lease before the standby was promoted: CI saw it wait
// for a count that cannot come).
func failedOver(t *testing.T, db *dbv1.Database) *dbv1.FailoverStatus {
	t.Helper()
	var lf *dbv1.FailoverStatus
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		lf = nil
		if r := dbtest.Get(ct, k8s, db).Status.Replication; r != nil {
			lf = r.LastFailover
		}
		if lf != nil && lf.AbortedAt == nil {
			assert.NotNil(ct, lf.DiscardedTransactions, "lastFailover.discardedTransactions once the old primary rejoined")
		}
	}, timeout, 250*time.Millisecond)
	if lf != nil && lf.AbortedAt != nil {
		t.Logf("a failover from %s to %s was abandoned: %s", lf.From, lf.To, lf.Reason)
		return nil
	}
	return lf
}

// apiProbe runs a pod that tries a TCP connection to the kubernetes
// Service every second, printing "ok" or "cut", and returns it once it
// runs.
func apiProbe(t *testing.T, ns string) *corev1.Pod {
	t.Helper()
	pod := dbtest.RestrictedPod(ns, "api-probe", local.Images["postgres:17"], []string{"/bin/bash", "-c",
		`while true; do if timeout 2 bash -c '</dev/tcp/` + realnode.APIServiceIP + `/443' 2>/dev/null; then echo ok; else echo cut; fi; sleep 1; done`})
	create(t, pod)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), pod, client.GracePeriodSeconds(0)) })
	require.Eventually(t, func() bool {
		_ = k8s.Get(context.Background(), client.ObjectKeyFromObject(pod), pod)
		return pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != ""
	}, timeout, 200*time.Millisecond, "the probe pod runs")
	return pod
}

// waitProbe waits until the probe's last three lines are all want.
func waitProbe(t *testing.T, pod *corev1.Pod, want string) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		logs, err := psql.Clientset.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{TailLines: ptr.To[int64](3)}).DoRaw(context.Background())
		if !assert.NoError(ct, err) {
			return
		}
		lines := strings.Fields(string(logs))
		assert.Equal(ct, []string{want, want, want}, lines, "the probe's last lines")
	}, timeout, time.Second)
}
