package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
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

const (
	leaseNS   = "default"
	leaseName = "db-primary"
)

// TestIsolatedPrimaryFencesAndRejoins runs two agents (primary db-0,
// standby db-1) sharing a Lease on a real kube-apiserver; db-0 reaches
// the API server through a proxy the test blackholes. db-0 commits K
// transactions db-1 never receives (its stream is cut first), then loses
// the API server: it fences itself (writes refused) within the renew
// deadline of its last renew; db-1, promoted with failover, takes the
// lease over only after that, no sooner than LeaseDuration after db-0's
// last renew; db-0, restarted on its data directory, rejoins db-1 as a
// standby through pg_rewind, reporting the K discarded transactions, which
// are gone from it.
//
// "restarted": db-0's agent is restarted once fenced (its pod deleted),
// the new agent finds the fence marker and the lease naming db-1;
// "in place": the fenced agent itself rejoins once it reads the lease
// naming db-1.
func TestIsolatedPrimaryFencesAndRejoins(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and a kube-apiserver; skipped under -short")
	}
	t.Run("restarted", func(t *testing.T) { testIsolatedPrimary(t, true) })
	t.Run("in place", func(t *testing.T) { testIsolatedPrimary(t, false) })
}

func testIsolatedPrimary(t *testing.T, restart bool) {
	env, restCfg, err := envtest.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	kube := kubernetes.NewForConfigOrDie(restCfg)
	leases := kube.CoordinationV1().Leases(leaseNS)
	ctx := context.Background()
	_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaseName, Namespace: leaseNS}}, metav1.CreateOptions{})
	require.NoError(t, err, "the operator creates the lease empty")

	c := newCluster(t)
	c.serverArgs = []string{"-c", "autovacuum=off"} // no commit of its own in the WAL the test counts
	hole := startBlackhole(t, restCfg.Host)
	proxied := rest.CopyConfig(restCfg)
	proxied.Host = "https://" + hole.addr
	aEnv := c.leaseEnv(t, proxied)
	a := c.start("db-0", aEnv...)
	b := c.start("db-1", c.leaseEnv(t, restCfg)...)
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

	// initdb takes the released lease first.
	_, err = c.client.Bootstrap(ctx, a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	sa := c.waitStatus(a, 90*time.Second, "a running primary", runningAs(agentapi.RolePrimary))
	assert.Equal(t, "db-0", holder(), "the new primary holds the lease")
	require.NotNil(t, sa.Lease)
	assert.True(t, sa.Lease.Held, "status says it holds the lease: %+v", sa.Lease)
	assert.Positive(t, sa.VolumeAvailableBytes)
	assert.False(t, sa.VolumeFull)

	pa := sql(t, a)
	mustExec(t, pa, fmt.Sprintf("CREATE ROLE %s WITH LOGIN REPLICATION PASSWORD '%s'", agentapi.ReplicationUser, strings.ReplaceAll(replPassword, "'", "''")))
	// what the replication controller grants for pg_rewind
	for _, fn := range []string{"pg_ls_dir(text, boolean, boolean)", "pg_stat_file(text, boolean)", "pg_read_binary_file(text)", "pg_read_binary_file(text, bigint, bigint, boolean)"} {
		mustExec(t, pa, "GRANT EXECUTE ON FUNCTION "+fn+" TO "+agentapi.ReplicationUser)
	}
	mustExec(t, pa, "SELECT pg_create_physical_replication_slot($1)", agentapi.SlotName(b.name))
	mustExec(t, pa, "CREATE TABLE t (id bigint PRIMARY KEY)")
	mustExec(t, pa, "INSERT INTO t SELECT generate_series(1, 100)")
	c.proxy.target.Store(int32(a.port))
	_, err = c.client.Bootstrap(ctx, b.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapClone})
	require.NoError(t, err)
	c.waitStatus(b, 90*time.Second, "a streaming standby", func(s agentapi.Status) bool {
		return runningAs(agentapi.RoleReplica)(s) && s.WALReceiver == "streaming"
	})
	sb := c.waitStatus(b, 10*time.Second, "the standby watching the lease", func(s agentapi.Status) bool {
		return s.Lease != nil && s.Lease.Holder == "db-0" && !s.Lease.Held
	})
	t.Logf("standby's view of the lease: %+v", *sb.Lease)

	if restart { // once is enough
		// A promote without failover while db-0 holds and renews the
		// lease: refused after waiting for it.
		pctx, pcancel := context.WithTimeout(ctx, 40*time.Second)
		refusedStart := time.Now()
		_, err = c.client.Promote(pctx, b.url, agentapi.PromoteRequest{})
		pcancel()
		assert.Equal(t, http.StatusConflict, agentCode(err), "a switchover promote while the primary renews its lease: %v", err)
		t.Logf("promote refused after %s: %v", time.Since(refusedStart).Round(time.Millisecond), err)
		assert.Equal(t, agentapi.RoleReplica, c.status(b).Role)
		assert.Equal(t, "db-0", holder())
	}

	// db-1 has everything so far; then its stream is cut and db-0 commits
	// K transactions it never receives.
	cur := c.status(a).CurrentLSN
	c.waitStatus(b, 20*time.Second, "replayed all of db-0's WAL", func(s agentapi.Status) bool {
		return s.ReplayedLSN != "" && lsn(t, s.ReplayedLSN) >= lsn(t, cur)
	})
	c.proxy.pause()
	const K = 7
	for i := 1; i <= K; i++ {
		mustExec(t, pa, "INSERT INTO t VALUES ($1)", -i)
	}

	// The writer probe: a new connection and a write (rolled back, so
	// that it commits nothing) every 50 ms.
	var lastWrite, firstRefusal atomic.Int64
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		for {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := probeWrite(pctx, a.port)
			cancel()
			now := time.Now().UnixNano()
			if err != nil {
				firstRefusal.Store(now)
				return
			}
			lastWrite.Store(now)
			time.Sleep(50 * time.Millisecond)
		}
	}()

	// Cut db-0 off the API server; db-1 is asked to fail over at once.
	hole.blackhole(true)
	cut := time.Now()
	t.Logf("db-0 cut off the API server at %s", cut.Format(time.RFC3339Nano))
	code, body := rawPromote(t, c, b, agentapi.PromoteRequest{Failover: true})
	require.Equal(t, http.StatusAccepted, code, "a failover promote answers at once: %s", body)
	code, body = rawPromote(t, c, b, agentapi.PromoteRequest{Failover: true})
	assert.Equal(t, http.StatusAccepted, code, "a second failover promote while one runs: %s", body)
	sb = c.status(b)
	assert.Equal(t, agentapi.StatePromoting, sb.State, "waiting for the lease: %+v", sb)
	t.Logf("db-1 while it waits: %s", sb.Message)

	// db-0 fences itself.
	fenced := c.waitStatus(a, agentapi.LeaseRenewDeadline+10*time.Second, "fenced", func(s agentapi.Status) bool { return s.State == agentapi.StateFenced })
	t.Logf("db-0: %s", fenced.Message)
	fencedAt := parseFencedAt(t, fenced.Message)
	select {
	case <-probeDone:
	case <-time.After(5 * time.Second):
		t.Fatal("db-0 still accepts writes 5 s after it said it fenced itself")
	}
	refused := time.Unix(0, firstRefusal.Load())
	lastOK := time.Unix(0, lastWrite.Load())
	// the last renew db-0 wrote (its time was taken when the request
	// began; a request cut short may have reached the server but does not
	// count for db-0, which then fences sooner).
	lastRenew := lease().Spec.RenewTime.Time
	require.Equal(t, "db-0", holder(), "db-1 took the lease before db-0 fenced")
	t.Logf("MEASURED last renew of db-0 %s, fenced %s after it, last write accepted %s after it, first refused %s after it",
		lastRenew.Format(time.RFC3339Nano), fencedAt.Sub(lastRenew).Round(time.Millisecond),
		lastOK.Sub(lastRenew).Round(time.Millisecond), refused.Sub(lastRenew).Round(time.Millisecond))
	assert.LessOrEqual(t, refused.Sub(lastRenew), agentapi.LeaseRenewDeadline+time.Second,
		"db-0 accepted writes longer than the renew deadline + 1 s after its last renew")
	assert.LessOrEqual(t, fencedAt.Sub(lastRenew), agentapi.LeaseRenewDeadline+time.Second)

	// db-1 takes the lease once db-0 cannot have renewed it, and promotes.
	sb = c.waitStatus(b, agentapi.LeaseDuration+4*agentapi.LeaseRetryPeriod+30*time.Second, "promoted", runningAs(agentapi.RolePrimary))
	promotedSeen := time.Now()
	l := lease()
	require.Equal(t, "db-1", *l.Spec.HolderIdentity)
	takeover := l.Spec.AcquireTime.Time
	t.Logf("MEASURED db-1 took the lease %s after db-0's last renew, %s after db-0 fenced; promoted (seen) %s after the cut",
		takeover.Sub(lastRenew).Round(time.Millisecond), takeover.Sub(fencedAt).Round(time.Millisecond), promotedSeen.Sub(cut).Round(time.Millisecond))
	assert.GreaterOrEqual(t, takeover.Sub(lastRenew), agentapi.LeaseDuration, "db-1 took the lease before it could have expired")
	assert.True(t, takeover.After(fencedAt), "db-1 took the lease (%s) before db-0 fenced (%s)", takeover, fencedAt)
	assert.True(t, takeover.After(refused), "db-1 took the lease before db-0 refused writes")
	assert.EqualValues(t, 2, *l.Spec.LeaseTransitions, "initdb's acquisition, then db-1's takeover")
	assert.EqualValues(t, 2, sb.Timeline)
	assert.True(t, sb.Lease.Held)
	pb := sql(t, b)
	assert.Equal(t, 0, count(t, pb, "SELECT count(*) FROM t WHERE id < 0"), "db-1 had the K transactions")
	mustExec(t, pb, "INSERT INTO t VALUES (1000)")
	mustExec(t, pb, "SELECT pg_create_physical_replication_slot($1)", agentapi.SlotName(a.name))
	// db-1 recycles the WAL since the divergence, as a primary that wrote
	// and checkpointed a while does: db-0's recovery after a rewind needs
	// it, so db-0 empties its data directory to be cloned again (before
	// the fix it waited for ever for a segment "already removed" on db-1).
	for i := range 4 {
		mustExec(t, pb, "INSERT INTO t VALUES ($1)", 3000+i)
		mustExec(t, pb, "SELECT pg_switch_wal()")
		mustExec(t, pb, "CHECKPOINT")
	}

	// The read-write Service follows db-1; db-0's agent is restarted (its
	// pod deleted) with the API server reachable again.
	c.proxy.target.Store(int32(b.port))
	c.proxy.resume()
	a2 := a
	if restart {
		require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
		select {
		case <-a.exited:
		case <-time.After(30 * time.Second):
			t.Fatal("the fenced agent did not exit within 30 s of SIGTERM")
		}
		assert.Equal(t, "db-1", holder(), "the fenced agent released a lease it did not hold")
		hole.blackhole(false)
		a2 = c.start("db-0", aEnv...)
	} else {
		hole.blackhole(false)
	}
	rejoinStart := time.Now()
	sa = c.waitStatus(a2, 120*time.Second, "rewound, emptied to be cloned again", func(s agentapi.Status) bool {
		return s.State == agentapi.StateWaiting && s.DataEmpty
	})
	t.Logf("db-0 after its rewind: %s", sa.Message)
	assert.Contains(t, sa.Message, "neither this instance nor")
	// what the replication controller does for an empty instance
	_, err = c.client.Bootstrap(ctx, a2.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapClone})
	require.NoError(t, err)
	sa = c.waitStatus(a2, 120*time.Second, "streaming from db-1 on timeline 2", func(s agentapi.Status) bool {
		return runningAs(agentapi.RoleReplica)(s) && s.WALReceiver == "streaming" && s.Timeline == 2
	})
	t.Logf("MEASURED db-0 (restarted: %t) rewound and streaming from db-1 after %s", restart, time.Since(rejoinStart).Round(time.Millisecond))
	require.NotNil(t, sa.LastRewind, "no rewind report")
	t.Logf("rewind report: %+v", *sa.LastRewind)
	assert.EqualValues(t, K, sa.LastRewind.DiscardedTransactions, "the transactions db-0 committed after the divergence")
	assert.EqualValues(t, 1, sa.LastRewind.DivergedTimeline)
	assert.NotEmpty(t, sa.LastRewind.DivergedLSN)
	assert.Greater(t, lsn(t, sa.LastRewind.EndLSN), lsn(t, sa.LastRewind.DivergedLSN))
	pa = sql(t, a2)
	waitFor(t, func() bool { return count(t, pa, "SELECT count(*) FROM t WHERE id = 1000") == 1 }, 20*time.Second,
		"a row committed on db-1 visible on db-0")
	assert.Equal(t, 0, count(t, pa, "SELECT count(*) FROM t WHERE id < 0"), "the discarded transactions' rows are still on db-0")
	assert.Equal(t, 100, count(t, pa, "SELECT count(*) FROM t WHERE id BETWEEN 1 AND 100"))
	assert.Equal(t, 4, count(t, pa, "SELECT count(*) FROM t WHERE id >= 3000"), "the rows db-1 committed after the failover")
	assert.Error(t, probeWrite(ctx, a2.port), "the rejoined former primary accepts writes")
	assert.Equal(t, "db-1", holder())
	_, err = os.Stat(filepath.Join(filepath.Dir(a2.pgdata), "dbkeeper-fenced"))
	assert.True(t, os.IsNotExist(err), "the fence marker stays after the rejoin: %v", err)

	// The report survives a restart of the agent.
	require.NoError(t, a2.cmd.Process.Signal(syscall.SIGTERM))
	<-a2.exited
	a3 := c.start("db-0", aEnv...)
	sa = c.waitStatus(a3, 60*time.Second, "a running standby", runningAs(agentapi.RoleReplica))
	require.NotNil(t, sa.LastRewind)
	assert.EqualValues(t, K, sa.LastRewind.DiscardedTransactions)

	// A switchover back: the demoted db-1 releases the lease after its
	// server stopped, and db-0's promote takes it at once.
	c.waitStatus(a3, 60*time.Second, "streaming", func(s agentapi.Status) bool { return s.WALReceiver == "streaming" })
	demoted, err := c.client.Demote(ctx, b.url)
	require.NoError(t, err)
	assert.Equal(t, "", holder(), "the demoted primary released the lease")
	promoteStart := time.Now()
	var promoted agentapi.Status
	waitFor(t, func() bool {
		promoted, err = c.client.Promote(ctx, a3.url, agentapi.PromoteRequest{MinReplayedLSN: demoted.ShutdownLSN})
		if agentCode(err) == http.StatusConflict && strings.Contains(err.Error(), "short of") {
			return false
		}
		require.NoError(t, err)
		return true
	}, 20*time.Second, "db-0 replayed up to db-1's shutdown checkpoint")
	t.Logf("MEASURED switchover promote with the lease: %s", time.Since(promoteStart).Round(time.Millisecond))
	assert.Less(t, time.Since(promoteStart), agentapi.LeaseDuration, "the promote waited for an expiry instead of taking the released lease")
	assert.Equal(t, agentapi.RolePrimary, promoted.Role)
	assert.Equal(t, "db-0", holder())
	assert.True(t, promoted.Lease.Held)
}

// probeWrite connects to the server on port and writes a row in a
// transaction it rolls back: nil says the server accepts writes.
func probeWrite(ctx context.Context, port int) error {
	conn, err := pgx.Connect(ctx, fmt.Sprintf("host=127.0.0.1 port=%d user=postgres password=%s dbname=postgres sslmode=disable connect_timeout=2", port, superPassword))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	_, err = tx.Exec(ctx, "INSERT INTO t VALUES (-1000000)")
	return err
}

var fencedAtRE = regexp.MustCompile(`fenced at (\S+):`)

func parseFencedAt(t *testing.T, msg string) time.Time {
	t.Helper()
	m := fencedAtRE.FindStringSubmatch(msg)
	require.NotNil(t, m, "the fenced message says when: %q", msg)
	at, err := time.Parse(time.RFC3339Nano, m[1])
	require.NoError(t, err)
	return at
}

// rawPromote posts a promote and returns the HTTP status and body.
func rawPromote(t *testing.T, c *cluster, in *instance, req agentapi.PromoteRequest) (int, string) {
	t.Helper()
	b, _ := json.Marshal(req)
	r, err := http.NewRequest(http.MethodPost, in.url+agentapi.PromotePath, bytes.NewReader(b))
	require.NoError(t, err)
	r.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.httpClient().Do(r)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// blackholeProxy forwards TCP to the API server; while blackholed it
// drops every byte both ways (connections stay open, nothing arrives), as
// a firewall dropping the pod's packets would.
type blackholeProxy struct {
	addr string
	on   atomic.Bool
	mu   sync.Mutex
}

func startBlackhole(t *testing.T, apiHost string) *blackholeProxy {
	u, err := url.Parse(apiHost)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	p := &blackholeProxy{addr: ln.Addr().String()}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				up, err := net.Dial("tcp", u.Host)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { p.copy(up, conn); up.Close() }()
				p.copy(conn, up)
			}()
		}
	}()
	return p
}

// copy copies src to dst, dropping what arrives while blackholed.
func (p *blackholeProxy) copy(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.on.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *blackholeProxy) blackhole(on bool) { p.on.Store(on) }
