package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/test/framework/promtest"
)

// TestAlertsFireOnRealFaults runs a real Prometheus that scrapes the agents
// of a primary and its streaming standby (labelled as the manager labels
// the series it serves again) and evaluates the chart's alert rules, with
// their thresholds set low and their durations compressed; it causes each
// fault an alert is about on the real servers and waits for that alert to
// fire, and for nothing else to, then undoes it and waits for the alert to
// clear: a transaction held open, connections near max_connections,
// transaction IDs consumed past the age threshold, archiving failing while
// WAL is written, the standby's replay paused behind a write, two crashes
// of the primary's server, the primary's server hung with the standby cut
// off from it, and a second primary.
// (The volume's alerts fire on a real node's sized volume, the backups' on
// the manager's series: test/realnode.)
func TestAlertsFireOnRealFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and Prometheus; skipped under -short")
	}
	promtest.Require(t)
	c := newCluster(t)
	ctx := context.Background()
	a, b, pa, archiveFails := archivingPair(t, c, "-c", "max_connections=20")

	// The transaction-ID threshold 1,000 above today's oldest age: the
	// healthy phase consumes a few.
	xidThreshold := count(t, pa, "SELECT max(age(datfrozenxid)) FROM pg_database WHERE NOT datistemplate") + 1000
	rules, err := promtest.Rules(map[string]string{
		"replicationLagBytes":         strconv.Itoa(1 << 20),
		"replicationReplayLagSeconds": "2",
		"connectionsUsedRatio":        "0.5",
		"xidAgeWarning":               strconv.Itoa(xidThreshold),
		"xidAgeCritical":              strconv.Itoa(xidThreshold),
		"oldestTransactionAgeSeconds": "3",
		"lastArchivedAgeSeconds":      "20",
	}, 3*time.Second, 30*time.Second)
	require.NoError(t, err)
	// A segment archived now: the archive is not stale while the healthy
	// phase lasts.
	mustExec(t, pa, "INSERT INTO t VALUES (0)")
	archived := stringQuery(t, pa, "SELECT pg_walfile_name(pg_switch_wal())")
	waitFor(t, func() bool {
		return stringQuery(t, pa, "SELECT COALESCE(last_archived_wal, '') FROM pg_stat_archiver") >= archived
	}, 20*time.Second, "the switched segment archived")
	labels := func(pod string) map[string]string {
		return map[string]string{"namespace": "alerts", "database": "db", "pod": pod}
	}
	prom := promtest.Start(t, promtest.Options{Rules: rules, Targets: []promtest.Target{
		{URL: a.url + agentapi.MetricsPath, Token: c.client.Token, Labels: labels(a.name)},
		{URL: b.url + agentapi.MetricsPath, Token: c.client.Token, Labels: labels(b.name)},
	}})

	// the alerts, the volume's aside: the agents' volume is the host's file
	// system, as full as the machine is (CI's was 90.7 % used, past the
	// default warning) and filled and emptied by the suites beside this one;
	// the volume's alerts are test/realnode's, on a volume of its own
	firing := func(what string, timeout time.Duration, want map[string][]string) {
		t.Helper()
		prom.WaitFiring(t, what, timeout, func(a promtest.Alert) bool { return !strings.HasPrefix(a.Labels["alertname"], "DbkeeperVolume") }, want)
	}

	// Healthy: both scraped, nothing fires for a while (the rules' "for"
	// is 3 s, evaluated every second).
	prom.WaitQuery(t, 30*time.Second, `dbkeeper_postgres_up == 1`, func(s []promtest.Sample) bool { return len(s) == 2 })
	time.Sleep(6 * time.Second)
	firing("nothing fires on the healthy pair", time.Second, nil)

	// Each fault of the primary's PostgreSQL at once.
	holder := sql(t, a)
	held, err := holder.Begin(ctx)
	require.NoError(t, err)
	_, err = held.Exec(ctx, "SELECT txid_current()")
	require.NoError(t, err)
	var conns []*pgx.Conn
	for range 10 {
		conns = append(conns, connectTo(t, a, "postgres"))
	}
	consumer := sql(t, a)
	for range 1500 {
		mustExec(t, consumer, "SELECT txid_current()")
	}
	require.NoError(t, os.WriteFile(archiveFails, nil, 0o644))
	mustExec(t, pa, "INSERT INTO t VALUES (1)")
	mustExec(t, pa, "SELECT pg_switch_wal()")
	pb := sql(t, b)
	mustExec(t, pb, "SELECT pg_wal_replay_pause()")
	mustExec(t, pa, "INSERT INTO t SELECT generate_series(1, 100000)")
	// WAL keeps coming while the faults last (the stale archive's rule
	// asks for a primary that writes).
	stopWriting := make(chan struct{})
	wrote := make(chan error, 1)
	go func() {
		w, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres", filepath.Join(a.dir, "run"), a.port))
		if err != nil {
			wrote <- err
			return
		}
		defer w.Close(ctx)
		for {
			select {
			case <-stopWriting:
				wrote <- nil
				return
			case <-time.After(500 * time.Millisecond):
				if _, err := w.Exec(ctx, "INSERT INTO t VALUES (2)"); err != nil {
					wrote <- err
					return
				}
			}
		}
	}()
	firing("the primary's faults fire their alerts", 90*time.Second, map[string][]string{
		"DbkeeperLongRunningTransaction":          {a.name},
		"DbkeeperConnectionsNearMax":              {a.name},
		"DbkeeperTransactionIDAgeHigh":            {a.name},
		"DbkeeperTransactionIDWraparoundImminent": {a.name},
		"DbkeeperWALArchiveFailing":               {a.name},
		"DbkeeperWALArchiveStale":                 {a.name},
		"DbkeeperReplicationLagHigh":              {a.name},
		"DbkeeperReplicationReplayLagHigh":        {a.name},
	})

	// Undone: the transaction committed, the connections closed, every
	// database frozen, archiving working again, replay resumed.
	require.NoError(t, held.Commit(ctx))
	for _, conn := range conns {
		require.NoError(t, conn.Close(ctx))
	}
	for _, db := range []string{"postgres", "template1"} {
		mustExec(t, connectTo(t, a, db), "VACUUM FREEZE")
	}
	require.NoError(t, os.Remove(archiveFails))
	mustExec(t, pa, "SELECT pg_switch_wal()")
	mustExec(t, pb, "SELECT pg_wal_replay_resume()")
	close(stopWriting)
	require.NoError(t, <-wrote)
	firing("every alert of the primary's faults clears", 90*time.Second, nil)

	// Two backends of the primary killed, one after the other: each time
	// the postmaster restarts every process and recovers (a crash of the
	// server, the pod still running).
	startTime := func() float64 {
		v := prom.WaitQuery(t, 30*time.Second, `dbkeeper_postgres_start_time_seconds{pod="`+a.name+`"}`,
			func(s []promtest.Sample) bool { return len(s) == 1 })
		return v[0].Value
	}
	for range 2 {
		before := startTime()
		victim := sql(t, a)
		backend := count(t, victim, "SELECT pg_backend_pid()")
		require.NoError(t, syscall.Kill(backend, syscall.SIGKILL))
		waitFor(t, func() bool { return startTime() > before }, 30*time.Second, "the crash restart's start time scraped")
	}
	firing("a server restarting fires its alert", 30*time.Second, map[string][]string{
		"DbkeeperInstanceRestarting": {a.name},
	})
	firing("the restarts' alert clears once they are out of its window", 60*time.Second, nil)

	// The primary's server hung and its standby cut off from it: the
	// primary's instance down, the Database without a primary, the
	// standby not streaming.
	pid := postmasterPID(a.pgdata)
	require.Positive(t, pid)
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
		}
	}
	t.Cleanup(thaw)
	c.proxy.pause()
	firing("a hung primary and a standby cut off fire their alerts", 60*time.Second, map[string][]string{
		"DbkeeperInstanceDown":        {a.name},
		"DbkeeperNoPrimary":           {""},
		"DbkeeperStandbyNotStreaming": {b.name},
	})
	thaw()
	c.proxy.resume()
	firing("the hung primary's alerts clear", 60*time.Second, nil)

	// The standby promoted by hand while the primary runs (what the
	// primary's Lease exists to prevent): two primaries. Its agent
	// stopped, the second primary's series go, and so does the alert.
	mustExec(t, pb, "SELECT pg_promote()")
	firing("a second primary fires its alert", 60*time.Second, map[string][]string{
		"DbkeeperMultiplePrimaries": {""},
	})
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-b.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("the second primary's agent did not exit within 60s of SIGTERM")
	}
	firing("the second primary's alert clears", 60*time.Second, nil)
}
