package agent_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// buildAgent builds this package's test binary (which runs the agent
// under childEnv) with version linked in as agentapi's build version, to
// dir/<version>.
func buildAgent(t *testing.T, dir, version string) string {
	t.Helper()
	out := filepath.Join(dir, version)
	cmd := exec.Command("go", "test", "-c", "-o", out,
		"-ldflags", "-X github.com/dbkeeper/dbkeeper/internal/agentapi.buildVersion="+version, ".")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "building the agent %s: %s", version, b)
	return out
}

// installAgent puts binary where the cluster's agents run it from: a
// directory of their own, which they may write (as the pod's emptyDir).
func (c *cluster) installAgent(binary string) {
	c.t.Helper()
	dir := filepath.Join(c.dir, "bin")
	c.mkdir(dir, 0o755)
	b, err := os.ReadFile(binary)
	require.NoError(c.t, err)
	c.bin = filepath.Join(dir, "manager")
	require.NoError(c.t, os.WriteFile(c.bin, b, 0o755))
	require.NoError(c.t, os.Chown(c.bin, c.uid, c.gid))
}

// pushBinary sends binary to in's agent as version, with the SHA-256 sum
// (its own when empty).
func (c *cluster) pushBinary(in *instance, binary []byte, version, sum string) (agentapi.TakeoverAnswer, error) {
	c.t.Helper()
	if sum == "" {
		h := sha256.Sum256(binary)
		sum = hex.EncodeToString(h[:])
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return c.client.PushBinary(ctx, in.url, version, sum, bytes.NewReader(binary), int64(len(binary)))
}

// TestTakeoverKeepsTheServer: a primary holding the primary Lease runs
// agent v1; v2 (another build of the binary) is pushed to it. A body
// whose SHA-256 differs, a binary whose --check-takeover fails and one
// that says another version are refused (409) and change nothing. Then
// v2 takes over in place: the same postmaster (pid and
// pg_postmaster_start_time), a session opened before answers on, the
// server's log lines after the switch still reach the agent's output,
// /status says v2 and that it adopted the server, the Lease stays with
// db-0 and is renewed, never fenced; the handover's files are gone; no
// line logged every 10 ms through the switch is lost. The adopted server
// is handed over again (back to v1), and stops with its agent.
func TestTakeoverKeepsTheServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent twice, starts PostgreSQL and a kube-apiserver; skipped under -short")
	}
	leases, restCfg := startLeaseAPI(t)
	renewTime := func() time.Time {
		l, err := leases.Get(context.Background(), leaseName, metav1.GetOptions{})
		require.NoError(t, err)
		if l.Spec.RenewTime == nil {
			return time.Time{}
		}
		return l.Spec.RenewTime.Time
	}
	c := newCluster(t)
	builds := t.TempDir()
	v1, v2 := buildAgent(t, builds, "v1-test"), buildAgent(t, builds, "v2-test")
	c.installAgent(v1)
	a := c.start("db-0", c.leaseEnv(t, restCfg)...)
	ctx := context.Background()
	_, err := c.client.Bootstrap(ctx, a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	s := c.waitStatus(a, 90*time.Second, "a running primary", runningAs(agentapi.RolePrimary))
	require.NotNil(t, s.Agent)
	assert.Equal(t, "v1-test", s.Agent.Version)
	assert.Equal(t, agentapi.Level, s.Agent.Level)
	assert.Nil(t, s.Agent.LastTakeover)

	pa := sql(t, a)
	startedAt := stringQuery(t, pa, "SELECT pg_postmaster_start_time()::text")
	backend := stringQuery(t, pa, "SELECT pg_backend_pid()::text")
	pid := postmasterPID(a.pgdata)
	mustExec(t, pa, "CREATE TABLE t (id int)")
	binDir := filepath.Dir(c.bin)

	// Refused, nothing changed: a bad sum, a failing check, another version.
	newBin, err := os.ReadFile(v2)
	require.NoError(t, err)
	_, err = c.pushBinary(a, newBin, "v2-test", strings.Repeat("0", 64))
	assert.Equal(t, http.StatusConflict, agentCode(err), "a bad sum: %v", err)
	assert.ErrorContains(t, err, "SHA-256")
	failing := []byte("#!/bin/sh\necho 'the check says no' >&2\nexit 3\n")
	_, err = c.pushBinary(a, failing, "v2-test", "")
	assert.Equal(t, http.StatusConflict, agentCode(err), "a failing check: %v", err)
	assert.ErrorContains(t, err, "the check says no")
	_, err = c.pushBinary(a, newBin, "v3-test", "")
	assert.Equal(t, http.StatusConflict, agentCode(err), "another version: %v", err)
	assert.ErrorContains(t, err, `not "v3-test"`)
	entries, err := os.ReadDir(binDir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "only the agent's binary: %v", entries)
	s = c.status(a)
	assert.Equal(t, "v1-test", s.Agent.Version)
	assert.Equal(t, agentapi.StateRunning, s.State)

	// The takeover, while a session logs a numbered line every 10 ms.
	renewedBefore := renewTime()
	logger := sql(t, a)
	stopLogging := make(chan struct{})
	logged := make(chan int)
	go func() {
		n := 0
		defer func() { logged <- n }()
		for {
			select {
			case <-stopLogging:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if _, err := logger.Exec(ctx, fmt.Sprintf("DO $$BEGIN RAISE LOG 'numbered line %d.'; END$$", n)); err != nil {
				return
			}
			n++
		}
	}()
	switched := time.Now()
	ans, err := c.pushBinary(a, newBin, "v2-test", "")
	require.NoError(t, err)
	assert.Equal(t, agentapi.TakeoverAnswer{From: "v1-test", Version: "v2-test"}, ans)
	// the new agent listens again once it adopted the server
	waitFor(t, func() bool {
		_, err := agentapi.Client{Token: token}.Status(ctx, a.url)
		return err == nil
	}, 30*time.Second, "the new agent serving /status")
	s = c.waitStatus(a, 30*time.Second, "v2 running", func(s agentapi.Status) bool {
		return s.Agent != nil && s.Agent.Version == "v2-test" && s.State == agentapi.StateRunning && s.Ready
	})
	t.Logf("v2 serves %s after the push", time.Since(switched).Round(time.Millisecond))
	require.NotNil(t, s.Agent.LastTakeover)
	assert.True(t, s.Agent.LastTakeover.Adopted, "%+v", s.Agent.LastTakeover)
	assert.Equal(t, "v1-test", s.Agent.LastTakeover.From)
	assert.Equal(t, agentapi.RolePrimary, s.Role)
	require.NotNil(t, s.Lease)
	assert.True(t, s.Lease.Held, "%+v", s.Lease)

	assert.Equal(t, pid, postmasterPID(a.pgdata), "the same postmaster")
	assert.Equal(t, startedAt, stringQuery(t, pa, "SELECT pg_postmaster_start_time()::text"), "the server never restarted")
	assert.Equal(t, backend, stringQuery(t, pa, "SELECT pg_backend_pid()::text"), "the session opened before answers")
	mustExec(t, pa, "INSERT INTO t VALUES (1)")
	close(stopLogging)
	lines := <-logged
	require.Positive(t, lines)
	waitFor(t, func() bool {
		b, _ := os.ReadFile(a.logPath)
		return bytes.Contains(b, fmt.Appendf(nil, "numbered line %d.", lines-1))
	}, 20*time.Second, "the last numbered line in the agent's output")
	out, err := os.ReadFile(a.logPath)
	require.NoError(t, err)
	var lost []int
	for i := range lines {
		if !bytes.Contains(out, fmt.Appendf(nil, "numbered line %d.", i)) {
			lost = append(lost, i)
		}
	}
	assert.Empty(t, lost, "of %d lines logged across the takeover, these never reached the agent's output", lines)
	mustExec(t, pa, "DO $$BEGIN RAISE LOG 'after the takeover: %', 'marker-7f3a'; END$$")
	waitFor(t, func() bool {
		b, _ := os.ReadFile(a.logPath)
		return bytes.Contains(b, []byte("marker-7f3a"))
	}, 20*time.Second, "the server's log line after the takeover in the agent's output")

	// the Lease: still db-0's, renewed since, never fenced
	waitFor(t, func() bool { return renewTime().After(renewedBefore.Add(agentapi.LeaseRetryPeriod)) },
		3*agentapi.LeaseRetryPeriod+5*time.Second, "the lease renewed by v2")
	assert.Equal(t, "db-0", leaseHolder(t, leases)())
	log, err := os.ReadFile(a.logPath)
	require.NoError(t, err)
	assert.NotContains(t, strings.ToLower(string(log)), "fencing", "no fence across the takeover")
	assert.Contains(t, string(log), "Adopted the running server")

	entries, err = os.ReadDir(binDir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{"manager", "manager.old"}, names, "the handover's files removed")

	// An adopted server is handed over again: back to v1.
	oldBin, err := os.ReadFile(v1)
	require.NoError(t, err)
	_, err = c.pushBinary(a, oldBin, "v1-test", "")
	require.NoError(t, err)
	waitFor(t, func() bool {
		s, err := agentapi.Client{Token: token}.Status(ctx, a.url)
		return err == nil && s.Agent != nil && s.Agent.Version == "v1-test" && s.State == agentapi.StateRunning &&
			s.Agent.LastTakeover != nil && s.Agent.LastTakeover.Adopted && s.Agent.LastTakeover.From == "v2-test"
	}, 30*time.Second, "v1 adopting the server from v2")
	assert.Equal(t, pid, postmasterPID(a.pgdata), "the same postmaster after two takeovers")
	log, err = os.ReadFile(a.logPath)
	require.NoError(t, err)
	assert.NotContains(t, string(log), "reading the server's log", "no pipe of the server's log failed across the takeovers")
	assert.Equal(t, startedAt, stringQuery(t, pa, "SELECT pg_postmaster_start_time()::text"))
	mustExec(t, pa, "DO $$BEGIN RAISE LOG 'after the second takeover: %', 'marker-9c1d'; END$$")
	waitFor(t, func() bool {
		b, _ := os.ReadFile(a.logPath)
		return bytes.Contains(b, []byte("marker-9c1d"))
	}, 20*time.Second, "the server's log line after the second takeover in the agent's output")

	// The adopted server stops as the agent's own on SIGTERM.
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-a.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("the agent did not exit after SIGTERM")
	}
	assert.Zero(t, postmasterPID(a.pgdata), "the adopted server stopped with its agent")
	assert.False(t, running(pid), "the postmaster exited")
}

// writeHandoverFile writes a handover file (and, when failed, the marker
// of an adoption begun) beside the cluster's agent binary, as a former
// agent would have, of a server of pid; it returns its path.
func (c *cluster) writeHandoverFile(pid int, failed bool) string {
	c.t.Helper()
	dir := filepath.Dir(c.bin)
	path := filepath.Join(dir, "handover.json")
	b, err := json.Marshal(map[string]any{"pid": pid, "output": []int{3, 4}, "state": agentapi.StateRunning,
		"from": "v0-test", "at": time.Now().Add(-time.Minute)})
	require.NoError(c.t, err)
	require.NoError(c.t, os.WriteFile(path, b, 0o600))
	require.NoError(c.t, os.Chown(path, c.uid, c.gid))
	if failed {
		marker := filepath.Join(dir, "handover.failed")
		require.NoError(c.t, os.WriteFile(marker, []byte("1\n"), 0o600))
		require.NoError(c.t, os.Chown(marker, c.uid, c.gid))
	}
	return path
}

// stopAgent stops in's agent, and so its server.
func (c *cluster) stopAgent(in *instance) {
	c.t.Helper()
	require.NoError(c.t, in.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-in.exited:
	case <-time.After(60 * time.Second):
		c.t.Fatalf("%s: the agent did not exit within 60s of SIGTERM", in.name)
	}
}

// TestTakeoverNotAdoptedStartsAnew: an agent that finds a handover it
// cannot adopt starts the server as after any restart, says why in its
// status and removes the handover: a handover of a process that is not
// its child; one whose adoption began before (handover.failed: the agent
// restarted while adopting, as a crash would), with the handover's
// variable set or not (a restarted container's environment has none).
func TestTakeoverNotAdoptedStartsAnew(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped under -short")
	}
	c := newCluster(t)
	c.installAgent(c.bin)
	a := c.start("db-0")
	_, err := c.client.Bootstrap(context.Background(), a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	c.waitStatus(a, 90*time.Second, "a running primary", runningAs(agentapi.RolePrimary))
	binDir := filepath.Dir(c.bin)

	for _, tc := range []struct {
		name   string
		failed bool
		env    bool
		says   string
	}{
		{"not its child", false, true, "is not the agent's child"},
		{"adoption begun before", true, true, "restarted while adopting"},
		{"adoption begun before, a new environment", true, false, "restarted while adopting"},
	} {
		c.stopAgent(a)
		// the test process: no agent's child
		path := c.writeHandoverFile(os.Getpid(), tc.failed)
		var env []string
		if tc.env {
			env = append(env, agentapi.EnvHandover+"="+path)
		}
		a = c.start("db-0", env...)
		s := c.waitStatus(a, 90*time.Second, tc.name+": a running primary", runningAs(agentapi.RolePrimary))
		require.NotNil(t, s.Agent, tc.name)
		require.NotNil(t, s.Agent.LastTakeover, tc.name)
		assert.False(t, s.Agent.LastTakeover.Adopted, tc.name)
		assert.Contains(t, s.Agent.LastTakeover.Message, tc.says, tc.name)
		if tc.env {
			assert.Equal(t, "v0-test", s.Agent.LastTakeover.From, tc.name)
		}
		assert.NoFileExists(t, path, tc.name)
		assert.NoFileExists(t, filepath.Join(binDir, "handover.failed"), tc.name)
	}
}

// TestTakeoverOfAStandby: a streaming standby's agent is replaced in
// place: the same postmaster and WAL receiver, still streaming, and what
// the primary commits after the switch reaches it.
func TestTakeoverOfAStandby(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent, starts PostgreSQL; skipped under -short")
	}
	c := newCluster(t)
	v2 := buildAgent(t, t.TempDir(), "v2-test")
	c.installAgent(c.bin)
	ctx := context.Background()
	a, b := c.start("db-0"), c.start("db-1")
	_, err := c.client.Bootstrap(ctx, a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	c.waitStatus(a, 90*time.Second, "a running primary", runningAs(agentapi.RolePrimary))
	pa := sql(t, a)
	mustExec(t, pa, fmt.Sprintf("CREATE ROLE %s WITH LOGIN REPLICATION PASSWORD '%s'", agentapi.ReplicationUser, strings.ReplaceAll(replPassword, "'", "''")))
	mustExec(t, pa, "SELECT pg_create_physical_replication_slot($1)", agentapi.SlotName(b.name))
	mustExec(t, pa, "CREATE TABLE t (id int)")
	c.proxy.target.Store(int32(a.port))
	_, err = c.client.Bootstrap(ctx, b.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapClone})
	require.NoError(t, err)
	streaming := func(s agentapi.Status) bool {
		return runningAs(agentapi.RoleReplica)(s) && s.WALReceiver == "streaming"
	}
	c.waitStatus(b, 90*time.Second, "a streaming standby", streaming)
	pb := sql(t, b)
	pid := postmasterPID(b.pgdata)
	receiver := stringQuery(t, pb, "SELECT pid::text FROM pg_stat_wal_receiver")
	startedAt := stringQuery(t, pb, "SELECT pg_postmaster_start_time()::text")

	newBin, err := os.ReadFile(v2)
	require.NoError(t, err)
	_, err = c.pushBinary(b, newBin, "v2-test", "")
	require.NoError(t, err)
	waitFor(t, func() bool {
		s, err := agentapi.Client{Token: token}.Status(ctx, b.url)
		return err == nil && s.Agent != nil && s.Agent.Version == "v2-test" && streaming(s) &&
			s.Agent.LastTakeover != nil && s.Agent.LastTakeover.Adopted
	}, 30*time.Second, "v2 adopting the streaming standby")
	assert.Equal(t, pid, postmasterPID(b.pgdata), "the same postmaster")
	assert.Equal(t, startedAt, stringQuery(t, pb, "SELECT pg_postmaster_start_time()::text"))
	assert.Equal(t, receiver, stringQuery(t, pb, "SELECT pid::text FROM pg_stat_wal_receiver"), "the same WAL receiver")
	mustExec(t, pa, "INSERT INTO t VALUES (42)")
	waitFor(t, func() bool { return count(t, pb, "SELECT count(*) FROM t WHERE id = 42") == 1 }, 20*time.Second, "the primary's commit on the standby")
	assert.NotEqual(t, "v2-test", c.status(a).Agent.Version, "the primary's agent is left alone")
}
