package agent_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/dbkeeper/dbkeeper/internal/agent"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// restartInPlace posts RestartPath to in's agent.
func (c *cluster) restartInPlace(in *instance) (agentapi.Status, error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	started := time.Now()
	s, err := c.client.Restart(ctx, in.url)
	c.t.Logf("%s: restart in place answered in %s: %+v, %v", in.name, time.Since(started).Round(time.Millisecond), s, err)
	return s, err
}

// TestRestartInPlaceLowersMaxConnections: max_connections lowered (100 →
// 60) on a primary holding the primary Lease and on its streaming
// standby. A standby restarted before its primary starts with the
// primary's 100 (the floor) and has nothing pending; POST /restart
// restarts the primary in place: a new postmaster with 60, still the
// primary on the same timeline, the Lease held by it throughout (never
// released, renewed, no transition) and no fence. The standby, which
// replayed the primary's new value, then has max_connections pending, and
// POST /restart gives it 60, a standby still streaming. A restart in
// place whose start a value refuses has the value of the last start put
// back and starts the primary again, holding the Lease. An agent without
// a running server, and a request without the token, are refused.
func TestRestartInPlaceLowersMaxConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and a kube-apiserver; skipped under -short")
	}
	p := startLeasedPair(t)
	c, a, b := p.c, p.a, p.b
	ctx := context.Background()

	// Refused: without the token, and without a running server.
	_, err := agentapi.Client{Token: "wrong"}.Restart(ctx, a.url)
	assert.Equal(t, http.StatusUnauthorized, agentCode(err), "a restart without the token: %v", err)
	idle := c.start("db-2")
	_, err = c.restartInPlace(idle)
	assert.Equal(t, http.StatusConflict, agentCode(err), "a restart without a server: %v", err)
	assert.Equal(t, agentapi.StateWaiting, c.status(idle).State)

	require.Equal(t, "100", show(t, a, "max_connections"))
	lowered := map[string]string{"max_connections": "60"}
	for _, in := range []*instance{a, b} {
		r := c.setParameters(in, lowered)
		assert.Empty(t, r.Refused, in.name)
		assert.Equal(t, []string{"max_connections"}, r.RestartOnly, in.name)
		assert.Equal(t, []string{"max_connections"}, r.PendingRestart, in.name)
	}

	// The standby restarts first, as a rollout would: its primary's 100.
	streaming := func(s agentapi.Status) bool {
		return runningAs(agentapi.RoleReplica)(s) && s.WALReceiver == "streaming"
	}
	b = c.restart(b, c.leaseEnv(t, p.restCfg)...)
	c.waitStatus(b, 90*time.Second, "streaming again", streaming)
	assert.Equal(t, "100", show(t, b, "max_connections"), "the primary's max_connections (the floor)")
	assert.Empty(t, c.setParameters(b, lowered).PendingRestart, "a restart would give the floor again")

	// The primary restarts in place.
	pa := sql(t, a)
	startedAt := stringQuery(t, pa, "SELECT pg_postmaster_start_time()::text")
	pid := postmasterPID(a.pgdata)
	before := p.leases()
	require.Equal(t, "db-0", p.holder())
	timeline := c.status(a).Timeline
	mustExec(t, pa, "INSERT INTO t VALUES (101)")

	log, err := os.ReadFile(a.logPath)
	require.NoError(t, err)
	takes := countLines(string(log), "Took the primary lease")

	// The standby's WAL receiver frozen: the primary's fast shutdown
	// waits for it to confirm the shutdown checkpoint, so the server
	// refuses connections for longer than the renew deadline.
	var receiver int
	require.NoError(t, sql(t, b).QueryRow(ctx, "SELECT pid FROM pg_stat_wal_receiver").Scan(&receiver))
	require.NoError(t, syscall.Kill(receiver, syscall.SIGSTOP))
	frozenFor := agentapi.LeaseRenewDeadline + 2*time.Second
	thaw := time.AfterFunc(frozenFor, func() { _ = syscall.Kill(receiver, syscall.SIGCONT) })
	t.Cleanup(func() { thaw.Stop(); _ = syscall.Kill(receiver, syscall.SIGCONT) })

	// Meanwhile: the Lease's holders, and its renewals while the server
	// refuses connections.
	leases := kubernetes.NewForConfigOrDie(p.restCfg).CoordinationV1().Leases(leaseNS)
	var mu sync.Mutex
	holders := map[string]bool{}
	renewedWhileDown := map[time.Time]bool{}
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			down := probeWrite(pctx, a.port) != nil
			cancel()
			if l, err := leases.Get(ctx, leaseName, metav1.GetOptions{}); err == nil {
				mu.Lock()
				holders[ptr.Deref(l.Spec.HolderIdentity, "")] = true
				if down && l.Spec.RenewTime != nil {
					renewedWhileDown[l.Spec.RenewTime.Time] = true
				}
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	restartBegan := time.Now()
	s, err := c.restartInPlace(a)
	restartTook := time.Since(restartBegan)
	close(stop)
	<-polled
	require.NoError(t, err)
	assert.Equal(t, agentapi.StateRunning, s.State)
	assert.True(t, s.Ready)
	assert.Equal(t, agentapi.RolePrimary, s.Role)
	assert.Equal(t, timeline, s.Timeline, "no promotion: the same timeline")
	require.NotNil(t, s.Lease)
	assert.True(t, s.Lease.Held, "the answer's lease")
	assert.NotEqual(t, pid, postmasterPID(a.pgdata), "a new postmaster")
	pa = sql(t, a)
	assert.NotEqual(t, startedAt, stringQuery(t, pa, "SELECT pg_postmaster_start_time()::text"), "the server restarted")
	assert.Equal(t, "60", show(t, a, "max_connections"))
	assert.Equal(t, "false", stringQuery(t, pa, "SELECT pg_is_in_recovery()::text"), "still the primary")
	mustExec(t, pa, "INSERT INTO t VALUES (102)")
	assert.Empty(t, c.setParameters(a, lowered).PendingRestart)

	assert.Greater(t, restartTook, agentapi.LeaseRenewDeadline, "the server was down longer than the renew deadline")
	mu.Lock()
	assert.Equal(t, map[string]bool{"db-0": true}, holders, "the Lease's holders read during the restart")
	assert.GreaterOrEqual(t, len(renewedWhileDown), 3, "renewals of the Lease seen while the server refused connections")
	t.Logf("MEASURED restart of the primary with its standby's WAL receiver frozen for %s: %s; %d renewals seen while the server was down",
		frozenFor, restartTook.Round(time.Millisecond), len(renewedWhileDown))
	mu.Unlock()
	after := p.leases()
	assert.Equal(t, "db-0", p.holder())
	assert.Equal(t, ptr.Deref(before.Spec.LeaseTransitions, 0), ptr.Deref(after.Spec.LeaseTransitions, 0), "no transition of the Lease")
	assert.True(t, after.Spec.RenewTime.After(before.Spec.RenewTime.Time), "renewed")
	assert.Equal(t, before.Annotations[agent.AnnotationReleasedBy], after.Annotations[agent.AnnotationReleasedBy])
	_, err = os.Stat(filepath.Join(filepath.Dir(a.pgdata), "dbkeeper-fenced"))
	assert.True(t, os.IsNotExist(err), "a fence marker: %v", err)
	log, err = os.ReadFile(a.logPath)
	require.NoError(t, err)
	assert.Equal(t, 1, countLines(string(log), "Restarting the server in place", `"role": "primary"`), "%s", log)
	assert.Zero(t, countLines(string(log), "Fencing"))
	assert.Zero(t, countLines(string(log), "Released the primary lease"))
	assert.Equal(t, takes, countLines(string(log), "Took the primary lease"), "the lease was held throughout: no new take")

	// The standby replays the primary's new value: its floor dropped.
	c.waitStatus(b, 60*time.Second, "streaming from the restarted primary", streaming)
	waitFor(t, func() bool { return count(t, sql(t, b), "SELECT count(*) FROM t WHERE id = 102") == 1 }, 30*time.Second,
		"the standby replayed past the primary's restart")
	assert.Equal(t, []string{"max_connections"}, c.setParameters(b, lowered).PendingRestart, "the standby runs with 100, a start gives it 60")

	pid = postmasterPID(b.pgdata)
	startedAt = stringQuery(t, sql(t, b), "SELECT pg_postmaster_start_time()::text")
	log, err = os.ReadFile(b.logPath)
	require.NoError(t, err)
	raised := countLines(string(log), "Raising a setting of this standby")
	require.Equal(t, 1, raised, "the start before: raised to the primary's 100")
	s, err = c.restartInPlace(b)
	require.NoError(t, err)
	assert.Equal(t, agentapi.RoleReplica, s.Role)
	assert.True(t, s.Ready)
	assert.NotEqual(t, pid, postmasterPID(b.pgdata), "a new postmaster")
	assert.NotEqual(t, startedAt, stringQuery(t, sql(t, b), "SELECT pg_postmaster_start_time()::text"), "the server restarted")
	assert.FileExists(t, filepath.Join(b.pgdata, "standby.signal"))
	assert.Equal(t, "60", show(t, b, "max_connections"))
	assert.Equal(t, "configuration file", stringQuery(t, sql(t, b), "SELECT source FROM pg_settings WHERE name = 'max_connections'"))
	assert.Equal(t, "true", stringQuery(t, sql(t, b), "SELECT pg_is_in_recovery()::text"), "still a standby")
	c.waitStatus(b, 60*time.Second, "streaming after its restart", streaming)
	mustExec(t, pa, "INSERT INTO t VALUES (103)")
	waitFor(t, func() bool { return count(t, sql(t, b), "SELECT count(*) FROM t WHERE id = 103") == 1 }, 30*time.Second,
		"a row committed after the standby's restart replayed on it")
	assert.Empty(t, c.setParameters(b, lowered).PendingRestart)
	log, err = os.ReadFile(b.logPath)
	require.NoError(t, err)
	assert.Equal(t, 1, countLines(string(log), "Restarting the server in place", `"role": "replica"`), "%s", log)
	assert.Equal(t, raised, countLines(string(log), "Raising a setting of this standby"), "the floor is 60 now: nothing raised")
	assert.Equal(t, "db-0", p.holder())

	// A value the start refuses, restarted in place: the value of the
	// last start put back, the primary started again as one, holding the
	// Lease, and the value refused from then on.
	// (by path: a bare name the image lacks is refused before it is
	// written, missingLibrary)
	bad := map[string]string{"max_connections": "60", "shared_preload_libraries": "$libdir/no_such_library"}
	r := c.setParameters(a, bad)
	assert.Empty(t, r.Refused)
	assert.Equal(t, []string{"shared_preload_libraries"}, r.PendingRestart)
	log, err = os.ReadFile(a.logPath)
	require.NoError(t, err)
	started := countLines(string(log), "Started the server")
	s, err = c.restartInPlace(a)
	require.NoError(t, err)
	assert.Equal(t, agentapi.RolePrimary, s.Role)
	require.NotNil(t, s.Lease)
	assert.True(t, s.Lease.Held)
	assert.Equal(t, "", show(t, a, "shared_preload_libraries"), "the value of the last start")
	assert.Equal(t, "60", show(t, a, "max_connections"))
	assert.Equal(t, "false", stringQuery(t, sql(t, a), "SELECT pg_is_in_recovery()::text"))
	log, err = os.ReadFile(a.logPath)
	require.NoError(t, err)
	assert.Equal(t, 1, countLines(string(log), "The server did not start", `"shared_preload_libraries"`, "no_such_library"), "%s", log)
	assert.Equal(t, started+2, countLines(string(log), "Started the server"), "the failed start, then the one with the value put back")
	assert.Zero(t, countLines(string(log), "Fencing"))
	assert.Equal(t, takes, countLines(string(log), "Took the primary lease"))
	assert.Equal(t, "db-0", p.holder())
	r = c.setParameters(a, bad)
	assert.Equal(t, []string{"shared_preload_libraries"}, keys(r.Refused))
	assert.Contains(t, r.Refused["shared_preload_libraries"], `could not access file "$libdir/no_such_library"`)
	assert.Empty(t, r.PendingRestart)
	c.waitStatus(b, 60*time.Second, "streaming from the primary started again", streaming)
}
