package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"

	"github.com/dbkeeper/dbkeeper/internal/agent"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// The failsafe (issue 28): a primary whose API server does not answer
// keeps serving while every other member of the Lease confirms it; one
// that fenced itself because a member did not, serves again once it reads
// the Lease still naming it. The agents reach a real kube-apiserver
// through a proxy the test blackholes (both ways, connections kept open:
// requests time out, as behind a firewall dropping packets).

// outageTime is how long the tests keep the API server away: three renew
// deadlines.
const outageTime = 30 * time.Second

// failsafeAPI is a kube-apiserver whose primary Lease names members, and
// the blackholed way the agents reach it.
type failsafeAPI struct {
	leases coordinationv1client.LeaseInterface
	hole   *blackholeProxy
	// proxied reaches the API server through hole.
	proxied *rest.Config
}

func startFailsafeAPI(t *testing.T, members string) *failsafeAPI {
	t.Helper()
	leases, restCfg := startLeaseAPI(t)
	l, err := leases.Get(context.Background(), leaseName, metav1.GetOptions{})
	require.NoError(t, err)
	l.Annotations = map[string]string{agentapi.AnnotationMembers: members}
	_, err = leases.Update(context.Background(), l, metav1.UpdateOptions{})
	require.NoError(t, err, "the operator names the members")
	hole := startBlackhole(t, restCfg.Host)
	proxied := rest.CopyConfig(restCfg)
	proxied.Host = "https://" + hole.addr
	return &failsafeAPI{leases: leases, hole: hole, proxied: proxied}
}

func (f *failsafeAPI) lease(t *testing.T) *coordinationv1.Lease {
	t.Helper()
	l, err := f.leases.Get(context.Background(), leaseName, metav1.GetOptions{})
	require.NoError(t, err)
	return l
}

// peerAgents is the environment that tells an agent where its peers'
// agents listen (on one host, instead of <pod>.<peer domain>).
func peerAgents(t *testing.T, peers ...*instance) string {
	m := map[string]string{}
	for _, p := range peers {
		m[p.name] = p.url
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return agent.EnvPeerAgents + "=" + string(b)
}

// writer probes the primary's writes every 100 ms (a new connection, a
// write rolled back) and keeps the first failure and the last success.
type writer struct {
	mu        sync.Mutex
	failures  []string
	lastOK    time.Time
	firstFail time.Time
	stop      chan struct{}
	done      chan struct{}
}

func startWriter(port int) *writer {
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := probeWrite(ctx, port)
			cancel()
			now := time.Now()
			w.mu.Lock()
			if err != nil {
				if w.firstFail.IsZero() {
					w.firstFail = now
				}
				w.failures = append(w.failures, fmt.Sprintf("%s: %v", now.Format("15:04:05.000"), err))
			} else {
				w.lastOK = now
			}
			w.mu.Unlock()
			select {
			case <-w.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *writer) halt() { close(w.stop); <-w.done }

func (w *writer) refused() (time.Time, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.firstFail, append([]string(nil), w.failures...)
}

// fenced says whether the agent's log tells of a fence.
func fenced(t *testing.T, in *instance) bool {
	b, err := os.ReadFile(in.logPath)
	require.NoError(t, err)
	return strings.Contains(string(b), "Fencing: the primary lease is lost")
}

// startPair starts db-1 (a standby to be) and db-0 (the primary, which
// knows where db-1's agent listens) on api, makes db-0 a primary with a
// table t and db-1 its streaming standby.
func startPair(t *testing.T, c *cluster, api *failsafeAPI) (a, b *instance) {
	t.Helper()
	ctx := context.Background()
	b = c.start("db-1", c.leaseEnv(t, api.proxied)...)
	a = c.start("db-0", append(c.leaseEnv(t, api.proxied), peerAgents(t, b))...)
	_, err := c.client.Bootstrap(ctx, a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	c.waitStatus(a, 90*time.Second, "a running primary", runningAs(agentapi.RolePrimary))
	pa := sql(t, a)
	mustExec(t, pa, fmt.Sprintf("CREATE ROLE %s WITH LOGIN REPLICATION PASSWORD '%s'", agentapi.ReplicationUser, strings.ReplaceAll(replPassword, "'", "''")))
	mustExec(t, pa, "SELECT pg_create_physical_replication_slot($1)", agentapi.SlotName(b.name))
	mustExec(t, pa, "CREATE TABLE t (id bigint PRIMARY KEY)")
	c.proxy.target.Store(int32(a.port))
	_, err = c.client.Bootstrap(ctx, b.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapClone})
	require.NoError(t, err)
	c.waitStatus(b, 90*time.Second, "a streaming standby watching the lease", func(s agentapi.Status) bool {
		return runningAs(agentapi.RoleReplica)(s) && s.WALReceiver == "streaming" && s.Lease != nil && s.Lease.Holder == "db-0"
	})
	return a, b
}

// endOutage waits until outageTime after cut, checks that the primary a
// served through it in failsafe without refusing one of w's writes nor
// fencing, then lets the API server answer again and checks that a
// renews the Lease and w's writes went on.
func endOutage(t *testing.T, c *cluster, api *failsafeAPI, a *instance, w *writer, cut time.Time) {
	t.Helper()
	time.Sleep(time.Until(cut.Add(outageTime)))
	s := c.status(a)
	assert.True(t, runningAs(agentapi.RolePrimary)(s), "%+v", s)
	assert.True(t, s.Lease.Failsafe)
	refused, failures := w.refused()
	assert.True(t, refused.IsZero(), "writes refused during the outage: %v", failures)
	assert.False(t, fenced(t, a), "the primary fenced itself")

	api.hole.blackhole(false)
	back := time.Now()
	waitRenewed(t, c, api, a, back)
	w.halt()
	refused, failures = w.refused()
	assert.True(t, refused.IsZero(), "writes refused: %v", failures)
}

// waitRenewed waits until the primary renewed the Lease after since and
// no longer says it serves in failsafe.
func waitRenewed(t *testing.T, c *cluster, api *failsafeAPI, in *instance, since time.Time) {
	t.Helper()
	waitFor(t, func() bool {
		l := api.lease(t)
		return l.Spec.RenewTime != nil && l.Spec.RenewTime.After(since) && *l.Spec.HolderIdentity == in.name
	}, 30*time.Second, "the primary renews the lease again")
	s := c.waitStatus(in, 10*time.Second, "renewing, not in failsafe", func(s agentapi.Status) bool {
		return s.Lease != nil && s.Lease.Held && !s.Lease.Failsafe
	})
	t.Logf("%s after the outage: %+v", in.name, *s.Lease)
	t.Logf("MEASURED renewed %s after the API server came back", time.Since(since).Round(time.Millisecond))
}

// TestSinglePrimaryServesThroughAnAPIOutage: with one instance (members:
// itself) nobody could be promoted, so a primary whose API server does
// not answer for 30 s keeps accepting writes (before issue 28 it fenced
// itself after the renew deadline and never served again), reports the
// failsafe, and renews once the API server is back.
func TestSinglePrimaryServesThroughAnAPIOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and a kube-apiserver; skipped under -short")
	}
	api := startFailsafeAPI(t, "db-0")
	ctx := context.Background()
	c := newCluster(t)
	a := c.start("db-0", c.leaseEnv(t, api.proxied)...)
	_, err := c.client.Bootstrap(ctx, a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	c.waitStatus(a, 90*time.Second, "a running primary", runningAs(agentapi.RolePrimary))
	mustExec(t, sql(t, a), "CREATE TABLE t (id bigint PRIMARY KEY)")

	w := startWriter(a.port)
	api.hole.blackhole(true)
	cut := time.Now()
	s := c.waitStatus(a, agentapi.LeaseRenewDeadline+10*time.Second, "serving in failsafe", func(s agentapi.Status) bool {
		return s.Lease != nil && s.Lease.Failsafe
	})
	t.Logf("MEASURED in failsafe %s after the cut: %+v", time.Since(cut).Round(time.Millisecond), *s.Lease)
	assert.True(t, s.Lease.Held)
	endOutage(t, c, api, a, w, cut)
	log, err := os.ReadFile(a.logPath)
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(string(log), "Serving without the API server: every member confirmed"), "logged once at entry")
	assert.Equal(t, 1, strings.Count(string(log), "No longer serving without the API server"), "logged once at exit")
}

// TestPrimaryAndStandbyServeThroughAnAPIOutage: a primary and its
// standby both cut off from the API server for 30 s: the standby confirms
// the primary every round, so the primary keeps accepting writes, and the
// standby refuses to be promoted meanwhile (switchover and failover
// alike); the primary renews once the API server is back.
func TestPrimaryAndStandbyServeThroughAnAPIOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and a kube-apiserver; skipped under -short")
	}
	api := startFailsafeAPI(t, "db-0,db-1")
	c := newCluster(t)
	a, b := startPair(t, c, api)

	w := startWriter(a.port)
	api.hole.blackhole(true)
	cut := time.Now()
	s := c.waitStatus(a, agentapi.LeaseRenewDeadline+10*time.Second, "serving in failsafe", func(s agentapi.Status) bool {
		return s.Lease != nil && s.Lease.Failsafe
	})
	t.Logf("MEASURED in failsafe %s after the cut: %+v", time.Since(cut).Round(time.Millisecond), *s.Lease)
	sb := c.waitStatus(b, 5*time.Second, "confirming db-0", func(s agentapi.Status) bool {
		return s.Lease != nil && s.Lease.ConfirmedFailsafeOf == "db-0"
	})
	t.Logf("db-1: %+v", *sb.Lease)

	for _, req := range []agentapi.PromoteRequest{{}, {Failover: true}} {
		code, body := rawPromote(t, c, b, req)
		assert.Equal(t, http.StatusConflict, code, "promote %+v while db-0 serves in failsafe: %s", req, body)
		assert.Contains(t, body, "db-0 is serving in failsafe: it checked in ")
		t.Logf("promote %+v refused: %s", req, strings.TrimSpace(body))
	}
	assert.Equal(t, agentapi.RoleReplica, c.status(b).Role)

	endOutage(t, c, api, a, w, cut)
	assert.Equal(t, "db-0", *api.lease(t).Spec.HolderIdentity)
	assert.Equal(t, agentapi.RoleReplica, c.status(b).Role)
}

// TestFencedPrimaryServesAgainWhenNobodyTookTheLease: the standby's agent
// is stopped (it cannot confirm) and the API server does not answer: the
// primary fences itself by its renew deadline. Once the API server is
// back, the Lease still names it (nobody was promoted): it takes it back
// and serves again by itself within seconds (before issue 28 it stayed
// fenced, the Lease naming it, until a person stepped in).
func TestFencedPrimaryServesAgainWhenNobodyTookTheLease(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and a kube-apiserver; skipped under -short")
	}
	api := startFailsafeAPI(t, "db-0,db-1")
	ctx := context.Background()
	c := newCluster(t)
	a, b := startPair(t, c, api)
	marker := filepath.Join(filepath.Dir(a.pgdata), "dbkeeper-fenced")

	require.NoError(t, b.cmd.Process.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = b.cmd.Process.Signal(syscall.SIGCONT) })
	w := startWriter(a.port)
	api.hole.blackhole(true)
	cut := time.Now()
	waitFor(t, func() bool { r, _ := w.refused(); return !r.IsZero() }, agentapi.LeaseRenewDeadline+5*time.Second,
		"the primary refuses writes: it fenced itself")
	w.halt()
	refused, _ := w.refused()
	lastRenew := api.lease(t).Spec.RenewTime.Time
	t.Logf("MEASURED writes refused %s after the cut, %s after the last renew",
		refused.Sub(cut).Round(time.Millisecond), refused.Sub(lastRenew).Round(time.Millisecond))
	assert.LessOrEqual(t, refused.Sub(lastRenew), agentapi.LeaseRenewDeadline+time.Second,
		"the primary accepted writes longer than the renew deadline + 1 s after its last renew")
	s := c.waitStatus(a, 5*time.Second, "fenced", func(s agentapi.Status) bool { return s.State == agentapi.StateFenced })
	t.Logf("db-0: %s", s.Message)
	assert.Contains(t, s.Message, "renew deadline")
	log, err := os.ReadFile(a.logPath)
	require.NoError(t, err)
	assert.Contains(t, string(log), "Not every member confirmed the failsafe", "no failsafe round asked db-1")

	// Fenced as long as it cannot read the Lease.
	time.Sleep(2 * agentapi.LeaseRetryPeriod)
	assert.Equal(t, agentapi.StateFenced, c.status(a).State)
	assert.Equal(t, "db-0", *api.lease(t).Spec.HolderIdentity)
	_, err = os.Stat(marker)
	require.NoError(t, err, "no fence marker")

	api.hole.blackhole(false)
	back := time.Now()
	s = c.waitStatus(a, 5*agentapi.LeaseRetryPeriod+15*time.Second, "the primary again", runningAs(agentapi.RolePrimary))
	t.Logf("MEASURED serving again %s after the API server came back", time.Since(back).Round(time.Millisecond))
	assert.True(t, s.Lease.Held)
	require.NoError(t, probeWrite(ctx, a.port))
	l := api.lease(t)
	assert.Equal(t, "db-0", *l.Spec.HolderIdentity)
	assert.EqualValues(t, 1, *l.Spec.LeaseTransitions, "initdb's acquisition only: taking its own lease back is no transition")
	_, err = os.Stat(marker)
	assert.True(t, os.IsNotExist(err), "the fence marker stays once it serves again: %v", err)
	waitRenewed(t, c, api, a, time.Now())

	// db-1, continued, streams from db-0 again.
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGCONT))
	c.waitStatus(b, 60*time.Second, "streaming again", func(s agentapi.Status) bool {
		return runningAs(agentapi.RoleReplica)(s) && s.WALReceiver == "streaming"
	})
}
