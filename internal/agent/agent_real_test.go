package agent_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/dbkeeper/dbkeeper/internal/agent"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/test/framework"
	"github.com/dbkeeper/dbkeeper/test/framework/postgres"
)

// childEnv makes the test binary run `manager agent` instead of the tests:
// the agents under test are subprocesses (they are PID 1-like supervisors
// with their own signal handling), started from a copy of this binary.
const childEnv = "DBKEEPER_AGENT_TEST_CHILD"

// kubeconfigEnv names, in a child, the kubeconfig its lease keeper uses
// (agent.Config.RestConfig) instead of the pod's in-cluster configuration.
const kubeconfigEnv = "DBKEEPER_AGENT_TEST_KUBECONFIG"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" && len(os.Args) > 1 && os.Args[1] == agentapi.VerifyCommand {
		if err := agent.VerifyMain(os.Args[2:], nil, func() logr.Logger { return zap.New(zap.UseDevMode(true)) }); err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(childEnv) == "1" {
		cfg, err := agent.ParseFlags(os.Args[1:], nil)
		if kc := os.Getenv(kubeconfigEnv); err == nil && kc != "" {
			cfg.RestConfig, err = clientcmd.BuildConfigFromFlags("", kc)
		}
		if err == nil {
			err = agent.Main(cfg, zap.New(zap.UseDevMode(true)))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const (
	token         = "agent-token-for-tests"
	replPassword  = "repl:pass\\word" // a ':' and a '\' prove the pgpass escaping
	superPassword = "super-password"
)

// cluster is what the agents of one test share: a scratch directory, the
// agent binary, and a TCP forwarder standing in for the read-write
// Service (it follows the primary the test points it at).
type cluster struct {
	t      *testing.T
	dir    string
	bin    string
	pgBin  string
	cred   *syscall.Credential
	uid    int
	gid    int
	proxy  *forwarder
	client agentapi.Client
	// tlsDir, when set, is the agents' EnvTLSDir and serverArgs the TLS
	// settings of their servers.
	tlsDir     string
	serverArgs []string
	// agentArgs are more flags of the agent of each instance, by name.
	agentArgs map[string][]string
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	pgBin, err := postgres.BinDir()
	require.NoError(t, err)
	dir, err := os.MkdirTemp("", "dbkeeper-agent-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	c := &cluster{t: t, dir: dir, pgBin: pgBin, uid: os.Geteuid(), gid: os.Getegid(), client: agentapi.Client{Token: token}}
	// PostgreSQL refuses root: when the tests run as root the agents run
	// as the package's postgres user, as the agent runs as uid 999 in its
	// pod; the agent itself never changes user.
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		require.NoError(t, err, "running as root needs the postgres user of the postgresql package")
		c.uid, _ = strconv.Atoi(u.Uid)
		c.gid, _ = strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(c.uid), Gid: uint32(c.gid)}
	}
	c.bin, err = agent.CopySelf(dir)
	require.NoError(t, err)
	c.proxy = startForwarder(t)
	return c
}

// instance is one agent and its server.
type instance struct {
	name    string
	dir     string
	pgdata  string
	port    int
	url     string
	cmd     *exec.Cmd
	exited  chan struct{}
	logPath string
}

func (c *cluster) mkdir(path string, mode os.FileMode) {
	require.NoError(c.t, os.MkdirAll(path, mode))
	require.NoError(c.t, os.Chmod(path, mode))
	require.NoError(c.t, os.Chown(path, c.uid, c.gid))
}

// start runs an agent for pod name, the command being the image's real
// entrypoint, with env added to its environment. Its data directory is
// empty the first time; a second start of the same name runs a new agent
// on the data directory the first left.
func (c *cluster) start(name string, env ...string) *instance {
	t := c.t
	t.Helper()
	in := &instance{name: name, dir: filepath.Join(c.dir, name), exited: make(chan struct{})}
	in.pgdata = filepath.Join(in.dir, "data")
	c.mkdir(in.dir, 0o755)
	if name == "db-0" {
		c.mkdir(in.pgdata, 0o700) // an empty volume; the others' PGDATA, like the pods', does not exist yet
	}
	c.mkdir(filepath.Join(in.dir, "run"), 0o755)
	c.mkdir(filepath.Join(in.dir, "tmp"), 0o700)
	var err error
	in.port, err = framework.FreePort()
	require.NoError(t, err)
	agentPort, err := framework.FreePort()
	require.NoError(t, err)
	in.url = "http://127.0.0.1:" + strconv.Itoa(agentPort)
	if c.tlsDir != "" {
		in.url = "https://127.0.0.1:" + strconv.Itoa(agentPort)
	}
	entrypoint, err := filepath.Abs("../../images/postgres/docker-entrypoint.sh")
	require.NoError(t, err)

	args := append([]string{
		"--listen=127.0.0.1:" + strconv.Itoa(agentPort), "--port=" + strconv.Itoa(in.port),
		"--socket-dir=" + filepath.Join(in.dir, "run"), "--primary-port=" + strconv.Itoa(c.proxy.port)}, c.agentArgs[name]...)
	args = append(args, "--",
		entrypoint, "postgres", "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "wal_log_hints=on")
	in.cmd = exec.Command(c.bin, append(args, c.serverArgs...)...)
	in.cmd.Env = append(os.Environ(),
		childEnv+"=1",
		"PATH="+c.pgBin+":"+os.Getenv("PATH"),
		"PGDATA="+in.pgdata,
		"TMPDIR="+filepath.Join(in.dir, "tmp"),
		"HOME="+in.dir, // libpq looks for a client certificate in ~/.postgresql
		"POSTGRES_USER=postgres",
		"POSTGRES_PASSWORD="+superPassword,
		"POSTGRES_INITDB_ARGS=--auth-local=trust --auth-host=scram-sha-256 --no-sync",
		agentapi.EnvPodName+"="+name,
		agentapi.EnvToken+"="+token,
		agentapi.EnvReplicationPassword+"="+replPassword,
		agentapi.EnvPrimaryHost+"=127.0.0.1",
		agentapi.EnvTLSDir+"="+c.tlsDir,
	)
	in.cmd.Env = append(in.cmd.Env, env...)
	in.logPath = filepath.Join(c.dir, fmt.Sprintf("%s-%d.log", name, time.Now().UnixNano()))
	logFile, err := os.Create(in.logPath)
	require.NoError(t, err)
	defer logFile.Close()
	in.cmd.Stdout, in.cmd.Stderr = logFile, logFile
	in.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGTERM}
	require.NoError(t, in.cmd.Start())
	go func() { _ = in.cmd.Wait(); close(in.exited) }()
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(in.logPath)
			t.Logf("agent %s log:\n%s", name, log)
		}
		_ = in.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-in.exited:
		case <-time.After(30 * time.Second):
			_ = in.cmd.Process.Kill()
			<-in.exited
		}
		// a server left behind by a killed agent
		if pid := postmasterPID(in.pgdata); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGQUIT)
		}
	})
	waitFor(t, func() bool {
		resp, err := c.httpClient().Get(in.url + agentapi.HealthPath)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 20*time.Second, fmt.Sprintf("agent %s listening", name))
	return in
}

func (c *cluster) httpClient() *http.Client {
	if c.client.HTTP != nil {
		return c.client.HTTP
	}
	return http.DefaultClient
}

func postmasterPID(pgdata string) int {
	b, err := os.ReadFile(filepath.Join(pgdata, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	return pid
}

func (c *cluster) status(in *instance) agentapi.Status {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.client.Status(ctx, in.url)
	require.NoError(c.t, err)
	return s
}

// waitStatus waits until in's status satisfies ok and returns it.
func (c *cluster) waitStatus(in *instance, timeout time.Duration, what string, ok func(agentapi.Status) bool) agentapi.Status {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var s agentapi.Status
	for {
		s = c.status(in)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: %s not reached after %s; last status %+v", in.name, what, timeout, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func runningAs(role agentapi.Role) func(agentapi.Status) bool {
	return func(s agentapi.Status) bool { return s.State == agentapi.StateRunning && s.Ready && s.Role == role }
}

// sql connects to in's server over its unix socket as the superuser.
func sql(t *testing.T, in *instance) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres", filepath.Join(in.dir, "run"), in.port))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func mustExec(t *testing.T, conn *pgx.Conn, q string, args ...any) {
	t.Helper()
	_, err := conn.Exec(context.Background(), q, args...)
	require.NoError(t, err, q)
}

func count(t *testing.T, conn *pgx.Conn, q string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, conn.QueryRow(context.Background(), q, args...).Scan(&n), q)
	return n
}

// lsn parses "X/Y".
func lsn(t *testing.T, s string) uint64 {
	t.Helper()
	hi, lo, ok := strings.Cut(s, "/")
	require.True(t, ok, "LSN %q", s)
	h, err := strconv.ParseUint(hi, 16, 32)
	require.NoError(t, err)
	l, err := strconv.ParseUint(lo, 16, 32)
	require.NoError(t, err)
	return h<<32 | l
}

func agentCode(err error) int {
	var e *agentapi.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// TestAgentsReplicateAndSwitchOver runs two agents on the host's
// PostgreSQL through the image's entrypoint: initdb makes a primary, a
// clone streams from it, a switchover (demote, promote with the shutdown
// LSN) loses no committed row and the old primary follows the new one.
func TestAgentsReplicateAndSwitchOver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped under -short")
	}
	c := newCluster(t)
	ctx := context.Background()
	a := c.start("db-0")
	b := c.start("db-1")

	// Authentication: none or a wrong token is refused, the probes are open.
	for _, hdr := range []string{"", "Bearer wrong", "Bearer " + token + "x"} {
		req, _ := http.NewRequest(http.MethodGet, a.url+agentapi.StatusPath, nil)
		if hdr != "" {
			req.Header.Set("Authorization", hdr)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "Authorization %q", hdr)
	}
	_, err := agentapi.Client{Token: "wrong"}.Bootstrap(ctx, a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	assert.Equal(t, http.StatusUnauthorized, agentCode(err), "a bootstrap without the token: %v", err)
	entries, _ := os.ReadDir(a.pgdata)
	assert.Empty(t, entries, "a refused bootstrap wrote into the data directory")

	s := c.status(a)
	assert.Equal(t, agentapi.StateWaiting, s.State)
	assert.True(t, s.DataEmpty)
	resp, err := http.Get(a.url + agentapi.ReadyPath)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "ready without a server")

	// initdb: a primary.
	_, err = c.client.Bootstrap(ctx, a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	sa := c.waitStatus(a, 90*time.Second, "a running primary", runningAs(agentapi.RolePrimary))
	require.NotEmpty(t, sa.SystemID)
	assert.EqualValues(t, 1, sa.Timeline)
	resp, err = http.Get(a.url + agentapi.ReadyPath)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	pa := sql(t, a)
	mustExec(t, pa, fmt.Sprintf("CREATE ROLE %s WITH LOGIN REPLICATION PASSWORD '%s'", agentapi.ReplicationUser, strings.ReplaceAll(replPassword, "'", "''")))
	mustExec(t, pa, "SELECT pg_create_physical_replication_slot($1)", agentapi.SlotName(b.name))
	mustExec(t, pa, "CREATE TABLE t (id bigint PRIMARY KEY)")
	mustExec(t, pa, "INSERT INTO t SELECT generate_series(1, 100)")

	// A second bootstrap of a data directory that holds a cluster: 409, and
	// nothing changed.
	before := dirStamp(t, a.pgdata)
	_, err = c.client.Bootstrap(ctx, a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	assert.Equal(t, http.StatusConflict, agentCode(err), "bootstrap of a non-empty data directory: %v", err)
	_, err = c.client.Bootstrap(ctx, a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapClone})
	assert.Equal(t, http.StatusConflict, agentCode(err), "clone into a non-empty data directory: %v", err)
	assert.Equal(t, before, dirStamp(t, a.pgdata), "a refused bootstrap changed the data directory's top level")
	assert.Equal(t, sa.SystemID, c.waitStatus(a, 10*time.Second, "running", runningAs(agentapi.RolePrimary)).SystemID)
	assert.Equal(t, 100, count(t, pa, "SELECT count(*) FROM t"))

	// A clone cut short leaves the data directory empty again and the
	// agent waiting, saying why.
	c.proxy.target.Store(int32(a.port))
	c.proxy.cut.Store(4 << 20)
	_, err = c.client.Bootstrap(ctx, b.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapClone})
	require.NoError(t, err)
	sb := c.waitStatus(b, 60*time.Second, "waiting again after a failed clone", func(s agentapi.Status) bool {
		return s.State == agentapi.StateWaiting && s.Message != ""
	})
	t.Logf("failed clone: %s", sb.Message)
	assert.True(t, sb.DataEmpty)
	entries, _ = os.ReadDir(b.pgdata)
	assert.Empty(t, entries, "a failed clone left files behind")
	c.proxy.cut.Store(0)

	// Clone: a streaming standby of the same cluster.
	cloneStart := time.Now()
	_, err = c.client.Bootstrap(ctx, b.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapClone})
	require.NoError(t, err)
	sb = c.waitStatus(b, 90*time.Second, "a streaming standby", func(s agentapi.Status) bool {
		return runningAs(agentapi.RoleReplica)(s) && s.WALReceiver == "streaming"
	})
	t.Logf("clone to streaming: %s", time.Since(cloneStart).Round(time.Millisecond))
	assert.Equal(t, sa.SystemID, sb.SystemID)
	assert.EqualValues(t, 1, sb.Timeline)
	pb := sql(t, b)
	assert.Equal(t, 100, count(t, pb, "SELECT count(*) FROM t"))
	assert.Equal(t, "streaming", stringQuery(t, pa, "SELECT state FROM pg_stat_replication WHERE application_name = $1", b.name),
		"the primary sees the standby by its pod name")
	assert.Equal(t, "true", stringQuery(t, pa, "SELECT active::text FROM pg_replication_slots WHERE slot_name = $1", agentapi.SlotName(b.name)),
		"the standby streams through its slot")

	// Rows reach the standby, its positions advance.
	mustExec(t, pa, "INSERT INTO t SELECT generate_series(101, 200)")
	committed := time.Now()
	waitFor(t, func() bool { return count(t, pb, "SELECT count(*) FROM t") == 200 }, 10*time.Second,
		"rows committed on the primary visible on the standby")
	t.Logf("commit to visible on the standby: %s", time.Since(committed).Round(time.Millisecond))
	sb2 := c.status(b)
	assert.Greater(t, lsn(t, sb2.ReplayedLSN), lsn(t, sb.ReplayedLSN), "the replayed LSN advances")
	assert.Greater(t, lsn(t, sb2.ReceivedLSN), lsn(t, sb.ReceivedLSN), "the received LSN advances")
	assert.GreaterOrEqual(t, lsn(t, c.status(a).CurrentLSN), lsn(t, sb2.ReplayedLSN))

	// The standby refuses writes.
	_, err = pb.Exec(ctx, "INSERT INTO t VALUES (-1)")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "a write on the standby")
	assert.Equal(t, "25006", pgErr.Code, "read_only_sql_transaction")

	// Wrong-role and too-early requests are refused.
	_, err = c.client.Demote(ctx, b.url)
	assert.Equal(t, http.StatusConflict, agentCode(err), "demote of a standby: %v", err)
	_, err = c.client.Promote(ctx, a.url, agentapi.PromoteRequest{})
	assert.Equal(t, http.StatusConflict, agentCode(err), "promote of a primary: %v", err)
	_, err = c.client.Promote(ctx, b.url, agentapi.PromoteRequest{MinReplayedLSN: "FF/0"})
	assert.Equal(t, http.StatusConflict, agentCode(err), "promote short of minReplayedLSN: %v", err)
	assert.Equal(t, agentapi.RoleReplica, c.status(b).Role)

	// Switchover under a steady stream of commits.
	var mu sync.Mutex
	var acked []int64
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		w, err := pgx.Connect(ctx, fmt.Sprintf("host=127.0.0.1 port=%d user=postgres password=%s dbname=postgres sslmode=disable", a.port, superPassword))
		if err != nil {
			return
		}
		defer w.Close(context.Background())
		for id := int64(1000); ; id++ {
			if _, err := w.Exec(ctx, "INSERT INTO t VALUES ($1)", id); err != nil {
				return
			}
			mu.Lock()
			acked = append(acked, id)
			mu.Unlock()
		}
	}()
	time.Sleep(300 * time.Millisecond)
	dctx, dcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer dcancel()
	demoted, err := c.client.Demote(dctx, a.url)
	require.NoError(t, err)
	<-writerDone
	require.NotEmpty(t, demoted.ShutdownLSN)
	mu.Lock()
	t.Logf("demoted at %s after %d commits during the switchover", demoted.ShutdownLSN, len(acked))
	require.NotEmpty(t, acked, "the writer committed nothing before the demote")
	mu.Unlock()
	assert.Equal(t, agentapi.RoleReplica, demoted.Status.Role, "the demoted instance restarts as a standby")

	var promoted agentapi.Status
	waitFor(t, func() bool {
		promoted, err = c.client.Promote(dctx, b.url, agentapi.PromoteRequest{MinReplayedLSN: demoted.ShutdownLSN})
		if agentCode(err) == http.StatusConflict {
			return false // not replayed that far yet
		}
		require.NoError(t, err)
		return true
	}, 20*time.Second, "the standby replayed up to the shutdown LSN")
	assert.Equal(t, agentapi.RolePrimary, promoted.Role)
	assert.EqualValues(t, 2, promoted.Timeline, "a promotion starts a new timeline")
	c.proxy.target.Store(int32(b.port))
	pb = sql(t, b)
	mustExec(t, pb, "SELECT pg_create_physical_replication_slot($1)", agentapi.SlotName(a.name))

	mu.Lock()
	want := acked
	mu.Unlock()
	got := count(t, pb, "SELECT count(*) FROM t WHERE id = ANY($1)", want)
	assert.Equal(t, len(want), got, "every row committed before the demote is on the new primary")
	mustExec(t, pb, "INSERT INTO t VALUES (-2)")

	// The old primary follows the new one.
	followStart := time.Now()
	sa = c.waitStatus(a, 60*time.Second, "streaming from the new primary on timeline 2", func(s agentapi.Status) bool {
		return runningAs(agentapi.RoleReplica)(s) && s.WALReceiver == "streaming" && s.Timeline == 2
	})
	t.Logf("old primary streaming from the new one after %s", time.Since(followStart).Round(time.Millisecond))
	pa = sql(t, a)
	waitFor(t, func() bool { return count(t, pa, "SELECT count(*) FROM t WHERE id = -2") == 1 }, 10*time.Second,
		"a row committed on the new primary visible on the old one")
	_, err = pa.Exec(ctx, "INSERT INTO t VALUES (-3)")
	require.ErrorAs(t, err, &pgErr, "a write on the demoted primary")
	assert.Equal(t, "25006", pgErr.Code)

	// SIGTERM: the server stops, the agent exits 0.
	pid := postmasterPID(a.pgdata)
	require.Positive(t, pid)
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-a.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("the agent did not exit within 60s of SIGTERM")
	}
	assert.Equal(t, 0, a.cmd.ProcessState.ExitCode(), "exit code after SIGTERM")
	assert.Equal(t, 0, postmasterPID(a.pgdata), "postmaster.pid left: the server did not shut down cleanly")
	assert.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "the postmaster still runs")

	// A postmaster that dies on its own takes the agent down, non-zero:
	// the kubelet restarts the container.
	pid = postmasterPID(b.pgdata)
	require.Positive(t, pid)
	require.NoError(t, syscall.Kill(pid, syscall.SIGQUIT))
	select {
	case <-b.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not exit within 30s of its server's death")
	}
	assert.NotEqual(t, 0, b.cmd.ProcessState.ExitCode(), "exit code after the server died")
}

// waitFor polls ok, in the test's goroutine, until it holds or timeout
// passes.
func waitFor(t *testing.T, ok func() bool, timeout time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func stringQuery(t *testing.T, conn *pgx.Conn, q string, args ...any) string {
	t.Helper()
	var s string
	require.NoError(t, conn.QueryRow(context.Background(), q, args...).Scan(&s), q)
	return s
}

// dirStamp lists dir's entries with their modification times.
func dirStamp(t *testing.T, dir string) map[string]time.Time {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	m := map[string]time.Time{}
	for _, e := range entries {
		if e.Name() == "postmaster.pid" || e.Name() == "pg_stat_tmp" || e.Name() == "pg_wal" || e.Name() == "global" || e.Name() == "pg_logical" || e.Name() == "base" || e.Name() == "pg_xact" || e.Name() == "pg_subtrans" || e.Name() == "pg_multixact" {
			continue // the running server writes these
		}
		fi, err := e.Info()
		require.NoError(t, err)
		m[e.Name()] = fi.ModTime()
	}
	return m
}

// forwarder is a TCP forwarder on 127.0.0.1 to the port in target; when
// cut is set it drops each connection after that many bytes from the
// server (a network failure in the middle of a clone).
type forwarder struct {
	port   int
	target atomic.Int32
	cut    atomic.Int64
	// paused refuses connections; pause closes the open ones.
	paused atomic.Bool
	mu     sync.Mutex
	open   map[net.Conn]bool
}

// pause closes every forwarded connection and refuses new ones until
// resume: a standby streaming through it stops receiving WAL.
func (f *forwarder) pause() {
	f.paused.Store(true)
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.open {
		c.Close()
	}
}

func (f *forwarder) resume() { f.paused.Store(false) }

func (f *forwarder) track(c net.Conn, on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if on {
		f.open[c] = true
	} else {
		delete(f.open, c)
	}
}

func startForwarder(t *testing.T) *forwarder {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &forwarder{port: ln.Addr().(*net.TCPAddr).Port, open: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				if f.paused.Load() {
					return
				}
				up, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(int(f.target.Load())))
				if err != nil {
					return
				}
				defer up.Close()
				f.track(conn, true)
				f.track(up, true)
				defer f.track(conn, false)
				defer f.track(up, false)
				go func() { _, _ = io.Copy(up, conn); up.Close() }()
				var from io.Reader = up
				if n := f.cut.Load(); n > 0 {
					from = io.LimitReader(up, n)
				}
				_, _ = io.Copy(conn, from)
			}()
		}
	}()
	return f
}

// TestSIGTERMDuringInitdb: a pod stopped while the entrypoint still runs
// (initdb, then its temporary server and psql) stops at once, exit 0,
// leaving no process of the instance running.
func TestSIGTERMDuringInitdb(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped under -short")
	}
	// the delays land in initdb and, on this machine, in the temporary
	// server's start
	for _, delay := range []time.Duration{300 * time.Millisecond, 1100 * time.Millisecond} {
		t.Run(delay.String(), func(t *testing.T) {
			c := newCluster(t)
			a := c.start("db-0")
			_, err := c.client.Bootstrap(context.Background(), a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
			require.NoError(t, err)
			time.Sleep(delay)
			s := c.status(a)
			t.Logf("state when stopped: %s", s.State)
			if delay < time.Second {
				require.Equal(t, agentapi.StateBootstrapping, s.State, "initdb already finished: the test proves nothing")
			}
			stopped := time.Now()
			require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
			select {
			case <-a.exited:
			case <-time.After(30 * time.Second):
				t.Fatal("the agent did not exit within 30s of SIGTERM during initdb")
			}
			t.Logf("stopped in %s", time.Since(stopped).Round(time.Millisecond))
			assert.Equal(t, 0, a.cmd.ProcessState.ExitCode())
			out, _ := exec.Command("pgrep", "-f", a.pgdata).Output()
			assert.Empty(t, strings.TrimSpace(string(out)), "processes of the instance left running")
		})
	}
}
