package agent_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
)

// TestPromotionOutlivesPgPromote promotes a standby whose replay is held
// back longer than pg_promote waits (--promote-timeout=2s): a session on
// the standby holds a lock that the primary's last statement takes
// exclusively, and max_standby_streaming_delay=-1 makes replay wait for
// it. pg_promote gives up, the promotion goes on. The agent must keep the
// lease, renewed, and say Promoting until the server leaves recovery, then
// run as the primary holding it. Before the fix it released the lease
// when pg_promote gave up and the server finished promoting without it.
func TestPromotionOutlivesPgPromote(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and a kube-apiserver; skipped under -short")
	}
	env, restCfg, err := envtest.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	leases := kubernetes.NewForConfigOrDie(restCfg).CoordinationV1().Leases(leaseNS)
	ctx := context.Background()
	_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaseName, Namespace: leaseNS}}, metav1.CreateOptions{})
	require.NoError(t, err)
	lease := func() *coordinationv1.Lease {
		l, err := leases.Get(ctx, leaseName, metav1.GetOptions{})
		require.NoError(t, err)
		return l
	}
	holder := func() string {
		if h := lease().Spec.HolderIdentity; h != nil {
			return *h
		}
		return ""
	}

	c := newCluster(t)
	c.serverArgs = []string{"-c", "max_standby_streaming_delay=-1", "-c", "max_standby_archive_delay=-1"}
	c.agentArgs = map[string][]string{"db-1": {"--promote-timeout=2s"}}
	a := c.start("db-0", c.leaseEnv(t, restCfg)...)
	b := c.start("db-1", c.leaseEnv(t, restCfg)...)
	_, err = c.client.Bootstrap(ctx, a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	c.waitStatus(a, 90*time.Second, "a running primary", runningAs(agentapi.RolePrimary))
	pa := sql(t, a)
	mustExec(t, pa, fmt.Sprintf("CREATE ROLE %s WITH LOGIN REPLICATION PASSWORD '%s'", agentapi.ReplicationUser, strings.ReplaceAll(replPassword, "'", "''")))
	mustExec(t, pa, "SELECT pg_create_physical_replication_slot($1)", agentapi.SlotName(b.name))
	mustExec(t, pa, "CREATE TABLE t (id bigint PRIMARY KEY)")
	mustExec(t, pa, "INSERT INTO t SELECT generate_series(1, 100)")
	c.proxy.target.Store(int32(a.port))
	_, err = c.client.Bootstrap(ctx, b.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapClone})
	require.NoError(t, err)
	c.waitStatus(b, 90*time.Second, "a streaming standby", func(s agentapi.Status) bool {
		return runningAs(agentapi.RoleReplica)(s) && s.WALReceiver == "streaming"
	})

	// A reader on the standby holds t; the primary then takes t
	// exclusively and commits a row: the standby receives it all but
	// cannot replay past the lock.
	pb := sql(t, b)
	waitFor(t, func() bool { return count(t, pb, "SELECT count(*) FROM t") == 100 }, 10*time.Second, "the rows on the standby")
	reader, err := pb.Begin(ctx)
	require.NoError(t, err)
	require.Equal(t, 100, count(t, pb, "SELECT count(*) FROM t"))
	mustExec(t, pa, "ALTER TABLE t ADD COLUMN note text")
	mustExec(t, pa, "INSERT INTO t VALUES (101, 'after the lock')")
	end := c.status(a).CurrentLSN
	sb := c.waitStatus(b, 20*time.Second, "received everything", func(s agentapi.Status) bool {
		return s.ReceivedLSN != "" && lsn(t, s.ReceivedLSN) >= lsn(t, end)
	})
	require.Less(t, lsn(t, sb.ReplayedLSN), lsn(t, end), "replay did not wait for the reader: the test proves nothing")

	// The primary goes away (its agent stops and releases the lease).
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-a.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("db-0's agent did not exit within 30 s of SIGTERM")
	}
	require.Equal(t, "", holder(), "db-0 released the lease")

	// The promote: pg_promote gives up after 2 s, the reader still holds
	// replay back; the caller (the operator) gives up after 5 s.
	start := time.Now()
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = c.client.Promote(pctx, b.url, agentapi.PromoteRequest{})
	pcancel()
	t.Logf("promote answered after %s: %v", time.Since(start).Round(time.Millisecond), err)
	assert.Error(t, err, "promoted while replay waits: the test proves nothing")
	sb = c.status(b)
	t.Logf("db-1 while replay waits: state %s, role %s, message %q, lease %+v", sb.State, sb.Role, sb.Message, sb.Lease)
	assert.Equal(t, agentapi.RoleReplica, sb.Role, "promoted before the reader let go: the test proves nothing")
	assert.Equal(t, agentapi.StatePromoting, sb.State, "the promotion goes on")
	require.NotNil(t, sb.Lease)
	assert.True(t, sb.Lease.Held, "db-1 gave the lease up while its promotion goes on")
	assert.Equal(t, "db-1", holder())

	// The reader lets go: the server leaves recovery.
	require.NoError(t, reader.Rollback(ctx))
	sb = c.waitStatus(b, 30*time.Second, "the primary", func(s agentapi.Status) bool { return s.Role == agentapi.RolePrimary && s.Ready })
	t.Logf("db-1 promoted: state %s, message %q, lease %+v", sb.State, sb.Message, sb.Lease)
	sb = c.waitStatus(b, 5*time.Second, "running", runningAs(agentapi.RolePrimary))
	require.NotNil(t, sb.Lease)
	assert.True(t, sb.Lease.Held, "the new primary does not hold the lease")
	assert.Equal(t, "db-1", holder())
	renewed := lease().Spec.RenewTime
	require.NotNil(t, renewed)
	time.Sleep(2*agentapi.LeaseRetryPeriod + time.Second)
	l := lease()
	assert.Equal(t, "db-1", *l.Spec.HolderIdentity)
	assert.True(t, l.Spec.RenewTime.After(renewed.Time), "the new primary does not renew the lease (%s, then %s)", renewed, l.Spec.RenewTime)
	pb = sql(t, b)
	mustExec(t, pb, "INSERT INTO t VALUES (102, 'on the new primary')")
	assert.Equal(t, 1, count(t, pb, "SELECT count(*) FROM t WHERE id = 101"), "the row after the lock")
}
