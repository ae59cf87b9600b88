package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
)

// leasedPair is a primary db-0 holding the primary lease on a real
// kube-apiserver, and its standby db-1 streaming through its slot.
type leasedPair struct {
	c       *cluster
	restCfg *rest.Config
	leases  func() *coordinationv1.Lease
	a, b    *instance
	aEnv    []string
	pa      *pgx.Conn
}

// holder is the lease's holder, "" when released.
func (p *leasedPair) holder() string {
	if h := p.leases().Spec.HolderIdentity; h != nil {
		return *h
	}
	return ""
}

// startLeasedPair starts the pair with serverArgs for both servers.
func startLeasedPair(t *testing.T, serverArgs ...string) *leasedPair {
	env, restCfg, err := envtest.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	leases := kubernetes.NewForConfigOrDie(restCfg).CoordinationV1().Leases(leaseNS)
	ctx := context.Background()
	_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaseName, Namespace: leaseNS}}, metav1.CreateOptions{})
	require.NoError(t, err)
	p := &leasedPair{c: newCluster(t), restCfg: restCfg, leases: func() *coordinationv1.Lease {
		l, err := leases.Get(ctx, leaseName, metav1.GetOptions{})
		require.NoError(t, err)
		return l
	}}
	c := p.c
	c.serverArgs = serverArgs
	p.aEnv = c.leaseEnv(t, restCfg)
	p.a = c.start("db-0", p.aEnv...)
	p.b = c.start("db-1", c.leaseEnv(t, restCfg)...)
	_, err = c.client.Bootstrap(ctx, p.a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	c.waitStatus(p.a, 90*time.Second, "a running primary", runningAs(agentapi.RolePrimary))
	p.pa = sql(t, p.a)
	mustExec(t, p.pa, fmt.Sprintf("CREATE ROLE %s WITH LOGIN REPLICATION PASSWORD '%s'", agentapi.ReplicationUser, strings.ReplaceAll(replPassword, "'", "''")))
	// what the replication controller grants for pg_rewind
	for _, fn := range []string{"pg_ls_dir(text, boolean, boolean)", "pg_stat_file(text, boolean)", "pg_read_binary_file(text)", "pg_read_binary_file(text, bigint, bigint, boolean)"} {
		mustExec(t, p.pa, "GRANT EXECUTE ON FUNCTION "+fn+" TO "+agentapi.ReplicationUser)
	}
	mustExec(t, p.pa, "SELECT pg_create_physical_replication_slot($1)", agentapi.SlotName(p.b.name))
	mustExec(t, p.pa, "CREATE TABLE t (id bigint PRIMARY KEY)")
	mustExec(t, p.pa, "INSERT INTO t SELECT generate_series(1, 100)")
	c.proxy.target.Store(int32(p.a.port))
	_, err = c.client.Bootstrap(ctx, p.b.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapClone})
	require.NoError(t, err)
	c.waitStatus(p.b, 90*time.Second, "a streaming standby", func(s agentapi.Status) bool {
		return runningAs(agentapi.RoleReplica)(s) && s.WALReceiver == "streaming"
	})
	return p
}

// TestRewindThatKeepsFailingClonesAgain: the former primary db-0 diverged
// from db-1 (K transactions db-1 never received) and then, its standby's
// slot gone, checkpointed away the WAL before the divergence, which
// pg_rewind reads back to the last common checkpoint: every pg_rewind
// fails ("could not open file .../pg_wal/...": No such file or
// directory). After maxRewindFailures
// (3) failures, with db-1 holding the lease and answering as the primary,
// db-0 keeps the rewind report (K discarded) and empties its data
// directory, Waiting to be cloned; cloned, it streams from db-1. Before
// the fix it retried pg_rewind for ever, Fenced.
func TestRewindThatKeepsFailingClonesAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and a kube-apiserver; skipped under -short")
	}
	p := startLeasedPair(t, "-c", "autovacuum=off") // no commit of its own in the WAL the test counts
	c, a, b, pa := p.c, p.a, p.b, p.pa
	ctx := context.Background()

	// db-1 replays everything up to a new segment, then its stream is cut
	// and db-0 commits K transactions in that segment.
	var before string
	require.NoError(t, pa.QueryRow(ctx, "SELECT pg_walfile_name(pg_current_wal_lsn())").Scan(&before))
	mustExec(t, pa, "SELECT pg_switch_wal()")
	cur := c.status(a).CurrentLSN
	c.waitStatus(b, 20*time.Second, "replayed all of db-0's WAL", func(s agentapi.Status) bool {
		return s.ReplayedLSN != "" && lsn(t, s.ReplayedLSN) >= lsn(t, cur)
	})
	c.proxy.pause()
	waitFor(t, func() bool {
		_, err := pa.Exec(ctx, "SELECT pg_drop_replication_slot($1)", agentapi.SlotName(b.name))
		return err == nil
	}, 20*time.Second, "db-1's slot on db-0 dropped (its walsender gone)")
	const K = 5
	for i := 1; i <= K; i++ {
		mustExec(t, pa, "INSERT INTO t VALUES ($1)", -i)
	}
	// the checkpoint removes the segments before its redo: pg_rewind
	// needs them.
	mustExec(t, pa, "CHECKPOINT")
	_, err := os.Stat(filepath.Join(a.pgdata, "pg_wal", before))
	require.True(t, os.IsNotExist(err), "db-0 kept %s: the test proves nothing (%v)", before, err)

	// db-0 stops (releasing the lease); db-1 is promoted and takes it.
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	<-a.exited
	require.Equal(t, "", p.holder())
	promoted, err := c.client.Promote(ctx, b.url, agentapi.PromoteRequest{})
	require.NoError(t, err)
	require.Equal(t, agentapi.RolePrimary, promoted.Role)
	require.Equal(t, "db-1", p.holder())
	c.proxy.target.Store(int32(b.port))
	c.proxy.resume()
	pb := sql(t, b)
	mustExec(t, pb, "SELECT pg_create_physical_replication_slot($1)", agentapi.SlotName(a.name))
	mustExec(t, pb, "INSERT INTO t VALUES (1000)")

	// db-0 comes back: the lease names db-1, it rejoins, pg_rewind fails.
	start := time.Now()
	a2 := c.start("db-0", p.aEnv...)
	c.waitStatus(a2, 60*time.Second, "a failed pg_rewind", func(s agentapi.Status) bool {
		return s.State == agentapi.StateFenced && strings.Contains(s.Message, "pg_rewind")
	})
	sa := c.waitStatus(a2, 60*time.Second, "emptied to be cloned again", func(s agentapi.Status) bool {
		return s.State == agentapi.StateWaiting && s.DataEmpty
	})
	t.Logf("MEASURED db-0 gave up pg_rewind after %s: %s", time.Since(start).Round(time.Millisecond), sa.Message)
	assert.Contains(t, sa.Message, "pg_rewind failed 3 times in a row")
	require.NotNil(t, sa.LastRewind, "no rewind report")
	assert.EqualValues(t, K, sa.LastRewind.DiscardedTransactions, "the transactions db-0 committed after the divergence")
	assert.EqualValues(t, 1, sa.LastRewind.DivergedTimeline)

	// what the replication controller does for an empty instance
	_, err = c.client.Bootstrap(ctx, a2.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapClone})
	require.NoError(t, err)
	sa = c.waitStatus(a2, 90*time.Second, "streaming from db-1 on timeline 2", func(s agentapi.Status) bool {
		return runningAs(agentapi.RoleReplica)(s) && s.WALReceiver == "streaming" && s.Timeline == 2
	})
	require.NotNil(t, sa.LastRewind)
	assert.EqualValues(t, K, sa.LastRewind.DiscardedTransactions)
	pa = sql(t, a2)
	waitFor(t, func() bool { return count(t, pa, "SELECT count(*) FROM t WHERE id = 1000") == 1 }, 20*time.Second,
		"a row committed on db-1 visible on db-0")
	assert.Equal(t, 0, count(t, pa, "SELECT count(*) FROM t WHERE id < 0"), "the discarded transactions' rows are still on db-0")
	assert.Equal(t, "db-1", p.holder())
}
