package agent_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/test/framework/objectstore"
)

// archiveFixture is a real object store (versitygw) with one bucket, and
// the files of its credentials and CA as a pod mounts them.
type archiveFixture struct {
	store  *objectstore.Store
	bucket string
	// credentials and ca are the directories of the Secrets' files.
	credentials, ca string
}

func newArchiveFixture(t *testing.T, c *cluster) *archiveFixture {
	t.Helper()
	_, err := os.Stat("/usr/bin/pgbackrest")
	require.NoError(t, err, "pgbackrest is not installed: apt-get install pgbackrest (.ci/run does)")
	ctx := context.Background()
	store, err := objectstore.Start(ctx, objectstore.Options{})
	require.NoError(t, err, "starting the object store (make tools builds versitygw)")
	t.Cleanup(func() { _ = store.Stop() })
	f := &archiveFixture{store: store, bucket: "backups", credentials: filepath.Join(c.dir, "s3-credentials"), ca: filepath.Join(c.dir, "s3-ca")}
	require.NoError(t, store.CreateBucket(ctx, f.bucket))
	c.mkdir(f.credentials, 0o755)
	c.mkdir(f.ca, 0o755)
	write := func(dir, name, v string) {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(v), 0o400))
		require.NoError(t, os.Chown(p, c.uid, c.gid))
	}
	write(f.credentials, agentapi.AccessKeyIDFile, store.AccessKey)
	write(f.credentials, agentapi.SecretAccessKeyFile, store.SecretKey)
	write(f.ca, agentapi.CAFile, string(store.CA))
	return f
}

// endpoint names the store as its certificate does (pgBackRest matches
// DNS names only), at the port it listens on.
func (f *archiveFixture) endpoint() string {
	_, port, _ := net.SplitHostPort(f.store.Local)
	return net.JoinHostPort("localhost", port)
}

// repository is the Repository of path as a pod's agent gets it.
func (f *archiveFixture) repository(path string) agentapi.Repository {
	return agentapi.Repository{Endpoint: f.endpoint(), Bucket: f.bucket, Path: path, URIStyle: "path",
		CredentialsDir: f.credentials, CADir: f.ca, RecoveryWindow: 7 * 24 * time.Hour, ArchiveTimeout: time.Minute}
}

func (f *archiveFixture) env(t *testing.T, path string) string {
	raw, err := json.Marshal(f.repository(path))
	require.NoError(t, err)
	return agentapi.EnvRepository + "=" + string(raw)
}

// recoverySource is a restore's source, the repository of path with its
// secrets in the request (as the operator passes them), and its target.
func (f *archiveFixture) recoverySource(path string, target agentapi.RecoveryTarget) *agentapi.RecoverySource {
	src := f.repository(path)
	src.CredentialsDir, src.CADir = "", ""
	src.Secrets = &agentapi.RepositorySecrets{AccessKeyID: f.store.AccessKey, SecretAccessKey: f.store.SecretKey, CA: string(f.store.CA)}
	return &agentapi.RecoverySource{Repository: src, Target: target}
}

// waitBaseBackups waits until in's repository holds n base backups, the
// last run finished without an error, and returns that status.
func (c *cluster) waitBaseBackups(in *instance, n int) agentapi.Status {
	c.t.Helper()
	s := c.waitStatus(in, 3*time.Minute, "the base backup finished", func(s agentapi.Status) bool {
		return s.Archive != nil && s.Archive.Run != nil && s.Archive.Run.Finished != nil && len(s.Archive.Backups) == n
	})
	require.Empty(c.t, s.Archive.Run.Error)
	return s
}

// TestArchiveAndPointInTimeRecovery archives a primary's WAL into a real
// object store with pgBackRest, takes a base backup through the agent,
// and recovers a new instance to the commit time of one row of a ledger:
// it has every row committed at or before that time and none after, it
// is a primary out of recovery with this Database's superuser password,
// its postgresql.auto.conf carries no recovery target (a clone would
// inherit it), and it archives into its own path, never the source's.
func TestArchiveAndPointInTimeRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and an object store; skipped under -short")
	}
	c := newCluster(t)
	c.serverArgs = []string{"-c", "track_commit_timestamp=on"}
	f := newArchiveFixture(t, c)
	ctx := context.Background()

	const sourcePath, targetPath = "/dbkeeper/ns/orders/uid-1", "/dbkeeper/ns/orders-restored/uid-2"
	a := c.start("db-0", f.env(t, sourcePath))
	_, err := c.client.Bootstrap(ctx, a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	c.waitStatus(a, 2*time.Minute, "running as the primary", runningAs(agentapi.RolePrimary))
	s := c.waitStatus(a, 2*time.Minute, "the repository ready", func(s agentapi.Status) bool { return s.Archive != nil && s.Archive.StanzaReady })
	assert.Equal(t, f.bucket+sourcePath, s.Archive.Repository)

	conn := sql(t, a)
	mustExec(t, conn, "CREATE TABLE ledger (id int PRIMARY KEY)")
	insert := func(from, to int) {
		for i := from; i <= to; i++ {
			mustExec(t, conn, "INSERT INTO ledger VALUES ($1)", i)
		}
	}
	insert(1, 20)

	// a base backup through the agent; asking again with its ID returns
	// the same run.
	run, err := c.client.Backup(ctx, a.url, agentapi.BackupRequest{ID: "b1", Type: "full"})
	require.NoError(t, err)
	again, err := c.client.Backup(ctx, a.url, agentapi.BackupRequest{ID: "b1", Type: "full"})
	require.NoError(t, err)
	assert.Equal(t, run.Started.Unix(), again.Started.Unix(), "a second request of the same ID started another backup")
	s = c.waitBaseBackups(a, 1)
	assert.Equal(t, "full", s.Archive.Backups[0].Type)
	assert.Positive(t, s.Archive.Backups[0].Size)

	// pgBackRest picks the backup by its stop time in whole seconds: a
	// target in the second the backup stopped finds none.
	time.Sleep(time.Until(s.Archive.Backups[0].Finished.Add(time.Second)) + 100*time.Millisecond)
	insert(21, 60)
	var target time.Time
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_xact_commit_timestamp(xmin) FROM ledger WHERE id = 40").Scan(&target))
	var segment string
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_walfile_name(pg_switch_wal())").Scan(&segment))
	c.waitStatus(a, time.Minute, "segment "+segment+" archived", func(s agentapi.Status) bool {
		return s.Archive != nil && s.Archive.LastArchivedWAL >= segment
	})

	// the recovery: a new instance, its own repository, the source's
	// passed in the request with its secrets.
	b := c.start("db-1", f.env(t, targetPath))
	_, err = c.client.Bootstrap(ctx, b.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapRestore,
		Recovery: f.recoverySource(sourcePath, agentapi.RecoveryTarget{Time: target.Format(time.RFC3339Nano)})})
	require.NoError(t, err)
	c.waitStatus(b, 3*time.Minute, "recovered and promoted", runningAs(agentapi.RolePrimary))

	restored := sql(t, b) // this Database's superuser password works
	assert.Equal(t, 40, count(t, restored, "SELECT count(*) FROM ledger"), "rows committed at or before the target")
	assert.Equal(t, 40, count(t, restored, "SELECT max(id) FROM ledger"), "no row committed after the target")
	assert.Equal(t, 0, count(t, restored, "SELECT count(*) FROM ledger WHERE pg_xact_commit_timestamp(xmin) > $1", target))
	auto, err := os.ReadFile(filepath.Join(b.pgdata, "postgresql.auto.conf"))
	require.NoError(t, err)
	assert.NotContains(t, string(auto), "recovery_target", "a clone of the restored primary would inherit the target")
	assert.NotContains(t, string(auto), "restore_command")

	// the new instance archives its new timeline into its own path only.
	c.waitStatus(b, 2*time.Minute, "its own repository ready", func(s agentapi.Status) bool { return s.Archive != nil && s.Archive.StanzaReady })
	var history string
	require.NoError(t, restored.QueryRow(ctx, "SELECT lpad(to_hex(timeline_id), 8, '0') || '.history' FROM pg_control_checkpoint()").Scan(&history))
	waitFor(t, func() bool {
		keys, err := f.store.List(ctx, f.bucket, strings.TrimPrefix(targetPath, "/")+"/archive/")
		return err == nil && containsSuffix(keys, history)
	}, time.Minute, "the new timeline's history file in the new repository")
	keys, err := f.store.List(ctx, f.bucket, strings.TrimPrefix(sourcePath, "/")+"/archive/")
	require.NoError(t, err)
	assert.False(t, containsSuffix(keys, history), "the restored instance wrote into the source's archive")

	// another server (its own initdb) pointed at the source's path is
	// refused by pgBackRest's check of the system identifier, and writes
	// nothing there. The source stops first, so that its archive is still.
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	<-a.exited
	before, err := f.store.List(ctx, f.bucket, strings.TrimPrefix(sourcePath, "/")+"/")
	require.NoError(t, err)
	other := c.start("db-2", f.env(t, sourcePath))
	_, err = c.client.Bootstrap(ctx, other.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	s = c.waitStatus(other, 2*time.Minute, "the repository refused", func(s agentapi.Status) bool {
		return s.Archive != nil && s.Archive.StanzaError != ""
	})
	assert.False(t, s.Archive.StanzaReady)
	assert.Contains(t, s.Archive.StanzaError, "do not match the database", "what the backup controller reads as RepositoryRefused")
	after, err := f.store.List(ctx, f.bucket, strings.TrimPrefix(sourcePath, "/")+"/")
	require.NoError(t, err)
	assert.Equal(t, before, after, "another server wrote into the repository")
}

// TestRecoveryPastTheArchiveWaitsAndRetries: a restore to a target past
// the end of the archive (an hour ahead) replays everything, and
// PostgreSQL exits with "recovery ended before configured recovery target
// was reached". The agent does not exit (the kubelet would restart it in a
// loop): it reports Failed, quoting that line and naming the setting to
// check, and starts the server again 10 s later, then 20 s after the next
// exit: over 30 s, one or two restarts, never a hot loop.
func TestRecoveryPastTheArchiveWaitsAndRetries(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and an object store; skipped under -short")
	}
	c := newCluster(t)
	f := newArchiveFixture(t, c)
	ctx := context.Background()
	const sourcePath = "/dbkeeper/ns/orders/uid-1"
	a := c.startArchiving(t, f.env(t, sourcePath))
	mustExec(t, sql(t, a), "CREATE TABLE ledger AS SELECT generate_series(1, 20) AS id")
	_, err := c.client.Backup(ctx, a.url, agentapi.BackupRequest{ID: "b1", Type: "full"})
	require.NoError(t, err)
	c.waitBaseBackups(a, 1)
	// the source stops: its archive ends there.
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	<-a.exited

	b := c.start("db-1")
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	_, err = c.client.Bootstrap(ctx, b.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapRestore,
		Recovery: f.recoverySource(sourcePath, agentapi.RecoveryTarget{Time: future})})
	require.NoError(t, err)
	s := c.waitStatus(b, 3*time.Minute, "the recovery reported failed", func(s agentapi.Status) bool {
		return s.State == agentapi.StateFailed && strings.Contains(s.Message, "recovery ended before configured recovery target")
	})
	failedAt := time.Now()
	t.Logf("failed: %s", s.Message)
	assert.Contains(t, s.Message, "spec.bootstrap.recovery.target", "the message names what to check")
	assert.Contains(t, s.Message, "starting it again in 10s")
	assert.True(t, s.Recovering, "recovery.signal stays: the recovery goes on with the next start")
	starts := func() int {
		log, err := os.ReadFile(b.logPath)
		require.NoError(t, err)
		return strings.Count(string(log), "Started the server")
	}
	first := starts()

	// the next exit waits twice as long.
	s = c.waitStatus(b, time.Minute, "the second exit reported", func(s agentapi.Status) bool {
		return s.State == agentapi.StateFailed && strings.Contains(s.Message, "starting it again in 20s")
	})
	assert.Contains(t, s.Message, "recovery ended before configured recovery target")
	for time.Since(failedAt) < 30*time.Second {
		select {
		case <-b.exited:
			t.Fatal("the agent exited")
		case <-time.After(time.Second):
		}
		c.status(b) // it answers throughout
	}
	restarts := starts() - first
	t.Logf("%d restarts in the 30 s after the first exit", restarts)
	assert.GreaterOrEqual(t, restarts, 1, "the server was not started again")
	assert.LessOrEqual(t, restarts, 2, "the server was started again more often than the back-off allows")
	log, err := os.ReadFile(b.logPath)
	require.NoError(t, err)
	assert.Contains(t, serverLogText(string(log)), "FATAL:  recovery ended before configured recovery target was reached", "the server's output reaches the container's log")

	// a SIGTERM meanwhile stops it cleanly.
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-b.exited:
		assert.True(t, b.cmd.ProcessState.Success(), "the agent's exit: %s", b.cmd.ProcessState)
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not stop within 30 s of its SIGTERM")
	}
}

func containsSuffix(keys []string, suffix string) bool {
	for _, k := range keys {
		if strings.HasSuffix(k, suffix) || strings.Contains(k, suffix) {
			return true
		}
	}
	return false
}

// TestArchiveReportsAStoreThatHangs: a store that stops answering (SIGSTOP)
// shows first as segments waiting to be archived, then, when pgBackRest
// gives up (8 × io-timeout), as a failure whose message has the cause.
func TestArchiveReportsAStoreThatHangs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and an object store; skipped under -short")
	}
	c := newCluster(t)
	f := newArchiveFixture(t, c)
	a := c.startArchiving(t, f.env(t, "/dbkeeper/ns/hang/uid"))

	require.NoError(t, f.store.Pause())
	defer f.store.Resume()
	conn := sql(t, a)
	mustExec(t, conn, "CREATE TABLE t AS SELECT 1 AS x")
	mustExec(t, conn, "SELECT pg_switch_wal()")
	s := c.waitStatus(a, time.Minute, "a segment waiting", func(s agentapi.Status) bool {
		return s.Archive != nil && s.Archive.WaitingSegments > 0 && s.Archive.OldestWaiting != nil
	})
	t.Logf("waiting: %d segments since %s", s.Archive.WaitingSegments, s.Archive.OldestWaiting)
	s = c.waitStatus(a, 3*time.Minute, "the failure reported", func(s agentapi.Status) bool {
		return s.Archive != nil && s.Archive.LastFailedTime != nil
	})
	t.Logf("failure: %s", s.Archive.LastFailure)
	assert.Contains(t, s.Archive.LastFailure, "timeout after 10000ms waiting for read")
	// PostgreSQL tries again at once, and that push hangs too: what the
	// failure said stays until a push ends.
	time.Sleep(5 * time.Second)
	s = c.status(a)
	assert.Contains(t, s.Archive.LastFailure, "timeout after 10000ms waiting for read", "the next push emptied the failure's message")
}

// TestArchiveTimeoutHoldsAfterARestart: after the agent restarts its
// primary on an existing data directory, a quiet database's commit is
// archived within archive_timeout, as before the restart. PostgreSQL's
// checkpointer first slept checkpoint_timeout (5 minutes) and nothing woke
// it: the commit waited 4 min 57 s (docs/benchmarks-backup.md).
func TestArchiveTimeoutHoldsAfterARestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and an object store; skipped under -short")
	}
	c := newCluster(t)
	f := newArchiveFixture(t, c)
	ctx := context.Background()
	repo := f.repository("/dbkeeper/ns/quiet/uid-1")
	repo.ArchiveTimeout = 10 * time.Second
	raw, err := json.Marshal(repo)
	require.NoError(t, err)
	env := agentapi.EnvRepository + "=" + string(raw)
	a := c.startArchiving(t, env)
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	<-a.exited

	a = c.start("db-0", env)
	c.waitStatus(a, 2*time.Minute, "running as the primary again", runningAs(agentapi.RolePrimary))
	conn := sql(t, a)
	mustExec(t, conn, "CREATE TABLE quiet (id int)")
	mustExec(t, conn, "INSERT INTO quiet VALUES (1)")
	var segment string
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_walfile_name(pg_current_wal_lsn())").Scan(&segment))
	committed := time.Now()
	c.waitStatus(a, time.Minute, "segment "+segment+" archived within archive_timeout and a margin", func(s agentapi.Status) bool {
		return s.Archive != nil && s.Archive.LastArchivedWAL >= segment
	})
	t.Logf("the quiet commit was archived %s after it", time.Since(committed).Round(time.Second))
}

// startArchiving starts db-0 with env (its repository), bootstraps it with
// initdb and waits until its repository is ready.
func (c *cluster) startArchiving(t *testing.T, env string) *instance {
	t.Helper()
	a := c.start("db-0", env)
	_, err := c.client.Bootstrap(context.Background(), a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	c.waitStatus(a, 2*time.Minute, "the repository ready", func(s agentapi.Status) bool { return s.Archive != nil && s.Archive.StanzaReady })
	return a
}
