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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
	"github.com/dbkeeper/dbkeeper/test/framework/operator"
)

// TestFrozenAgentFencesAndLeaseOnRestart: a primary's agent stopped
// (SIGSTOP) longer than the renew deadline fences its server as soon as it
// runs again (its watchdog is a timer on the monotonic clock, not the
// renew loop); the lease still names it (nobody was promoted), so it
// takes it back and runs as the primary again in place (issue 28; before,
// it stayed fenced for ever). A server that crashes does not release the
// lease (the agent restarts in place as the same holder), and an agent
// restarted with the fence marker and the lease still naming it starts
// as the primary; a SIGTERM (pod deletion) releases it after the server
// stopped.
func TestFrozenAgentFencesAndLeaseOnRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and a kube-apiserver; skipped under -short")
	}
	leases, restCfg := startLeaseAPI(t)
	ctx := context.Background()
	holder := leaseHolder(t, leases)

	c := newCluster(t)
	aEnv := c.leaseEnv(t, restCfg)
	a := c.start("db-0", aEnv...)
	_, err := c.client.Bootstrap(ctx, a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	c.waitStatus(a, 90*time.Second, "a running primary", runningAs(agentapi.RolePrimary))
	require.Equal(t, "db-0", holder())
	mustExec(t, sql(t, a), "CREATE TABLE t (id bigint PRIMARY KEY)")
	require.NoError(t, probeWrite(ctx, a.port))
	marker := filepath.Join(filepath.Dir(a.pgdata), "dbkeeper-fenced")

	// Frozen longer than the renew deadline.
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGSTOP))
	time.Sleep(agentapi.LeaseRenewDeadline + 2*time.Second)
	require.NoError(t, probeWrite(ctx, a.port), "the server runs on while its agent is frozen (the documented limit)")
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGCONT))
	resumed := time.Now()
	var refused time.Duration
	waitFor(t, func() bool {
		if probeWrite(ctx, a.port) != nil {
			refused = time.Since(resumed)
			return true
		}
		return false
	}, 5*time.Second, "writes refused after the agent resumed")
	t.Logf("MEASURED writes refused %s after the frozen agent resumed", refused.Round(time.Millisecond))
	assert.Less(t, refused, time.Second+500*time.Millisecond, "the watchdog fences right after the agent resumes")

	// Nobody took the lease: the fenced agent takes it back and serves
	// again in place.
	s := c.waitStatus(a, 30*time.Second, "the primary again, in place", runningAs(agentapi.RolePrimary))
	t.Logf("MEASURED serving again %s after the frozen agent resumed", time.Since(resumed).Round(time.Millisecond))
	assert.True(t, s.Lease.Held)
	assert.Equal(t, "db-0", holder())
	require.NoError(t, probeWrite(ctx, a.port))
	log, err := os.ReadFile(a.logPath)
	require.NoError(t, err)
	assert.Regexp(t, `Fencing: the primary lease is lost.*renew deadline`, string(log))
	_, err = os.Stat(marker)
	assert.True(t, os.IsNotExist(err), "the fence marker stays once it serves again: %v", err)

	// A crash keeps the lease.
	pid := postmasterPID(a.pgdata)
	require.Positive(t, pid)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	select {
	case <-a.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not exit after its server died")
	}
	assert.NotEqual(t, 0, a.cmd.ProcessState.ExitCode())
	assert.Equal(t, "db-0", holder(), "a crash released the lease")

	// Restarted with the fence marker (fenced, then its pod deleted) and
	// the lease still naming it: it starts as the primary.
	require.NoError(t, os.WriteFile(marker, []byte("fenced by the test\n"), 0o600))
	a = c.start("db-0", aEnv...)
	restarted := time.Now()
	c.waitStatus(a, 60*time.Second, "the primary again after the crash, fence marker and all", runningAs(agentapi.RolePrimary))
	t.Logf("restarted as the primary after a crash (fence marker present) in %s", time.Since(restarted).Round(time.Millisecond))
	require.NoError(t, probeWrite(ctx, a.port))
	_, err = os.Stat(marker)
	assert.True(t, os.IsNotExist(err), "the fence marker stays once it starts as the primary: %v", err)

	// SIGTERM releases it, after the server stopped.
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	<-a.exited
	assert.Equal(t, 0, a.cmd.ProcessState.ExitCode())
	assert.Equal(t, 0, postmasterPID(a.pgdata))
	assert.Equal(t, "", holder(), "a stopped primary releases the lease")
}

// TestFenceKillsTheBackendsOfAStuckPostmaster: a fence whose postmaster
// cannot pass its immediate shutdown on (stopped here; stuck in I/O on a
// node) kills the backends too. PostgreSQL's backends each run in a
// session of their own, so the postmaster's process group does not reach
// them: a session whose COMMIT was already sent committed it after the
// fence, an acknowledged write on a primary that had lost the lease.
func TestFenceKillsTheBackendsOfAStuckPostmaster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and a kube-apiserver; skipped under -short")
	}
	leases, restCfg := startLeaseAPI(t)
	ctx := context.Background()

	c := newCluster(t)
	a := c.start("db-0", c.leaseEnv(t, restCfg)...)
	_, err := c.client.Bootstrap(ctx, a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	c.waitStatus(a, 90*time.Second, "a running primary", runningAs(agentapi.RolePrimary))
	mustExec(t, sql(t, a), "CREATE TABLE t (id bigint PRIMARY KEY)")

	// A session with a write in progress: its backend and the postmaster
	// stop, its COMMIT waits in the socket.
	session := sql(t, a)
	mustExec(t, session, "BEGIN")
	mustExec(t, session, "INSERT INTO t VALUES (42)")
	var backend int
	require.NoError(t, session.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend))
	pm := postmasterPID(a.pgdata)
	require.Positive(t, pm)
	require.NoError(t, syscall.Kill(backend, syscall.SIGSTOP))
	require.NoError(t, syscall.Kill(pm, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(backend, syscall.SIGKILL) })
	committed := make(chan error, 1)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := session.Exec(cctx, "COMMIT")
		committed <- err
	}()

	// Another holder: the agent fences at its next read of the lease.
	l, err := leases.Get(ctx, leaseName, metav1.GetOptions{})
	require.NoError(t, err)
	l.Spec.HolderIdentity = ptr.To("db-1")
	l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	require.NoError(t, err)
	waitFor(t, func() bool { return !running(pm) },
		agentapi.LeaseRetryPeriod+agentapi.LeaseRenewDeadline, "the fence ends the stopped postmaster")

	_ = syscall.Kill(backend, syscall.SIGCONT)
	select {
	case err := <-committed:
		assert.Error(t, err, "the COMMIT sent before the fence was acknowledged after it")
	case <-time.After(20 * time.Second):
		t.Fatal("the COMMIT neither failed nor succeeded")
	}
	waitFor(t, func() bool { return !running(backend) }, 5*time.Second, "the backend is gone")
}

// running says pid is a process that has not exited (a zombie has).
func running(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z"
}

// startLeaseAPI starts a kube-apiserver (stopped at the end of the test)
// with the empty primary Lease, as the statefulset controller creates it,
// and returns the Leases of its namespace and the server's config.
func startLeaseAPI(t *testing.T) (coordinationv1client.LeaseInterface, *rest.Config) {
	t.Helper()
	env, restCfg, err := envtest.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	leases := kubernetes.NewForConfigOrDie(restCfg).CoordinationV1().Leases(leaseNS)
	_, err = leases.Create(context.Background(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaseName, Namespace: leaseNS}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return leases, restCfg
}

// leaseHolder reads the primary Lease's holder (empty when none).
func leaseHolder(t *testing.T, leases coordinationv1client.LeaseInterface) func() string {
	return func() string {
		l, err := leases.Get(context.Background(), leaseName, metav1.GetOptions{})
		require.NoError(t, err)
		if l.Spec.HolderIdentity != nil {
			return *l.Spec.HolderIdentity
		}
		return ""
	}
}

// leaseEnv is the environment of an agent that holds the primary Lease
// through the kube-apiserver of cfg (a kubeconfig the agents' user reads).
func (c *cluster) leaseEnv(t *testing.T, cfg *rest.Config) []string {
	t.Helper()
	path := operator.WriteKubeconfig(t, cfg, c.dir)
	require.NoError(t, os.Chown(path, c.uid, c.gid))
	return []string{agentapi.EnvNamespace + "=" + leaseNS, agentapi.EnvLeaseName + "=" + leaseName, kubeconfigEnv + "=" + path}
}
