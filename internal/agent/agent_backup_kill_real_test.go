package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/test/framework/faults"
)

// TestBaseBackupCutShortNeverCounts kills an instance while pgBackRest
// copies its full base backup: the agent and everything it started
// (PostgreSQL, pgBackRest and its local processes) get SIGKILL at once,
// as a container's kill does. The agent started again on the same data
// directory lists no base backup, reports the cut run as failed (its
// persisted record too, and to a second request of its ID), and no
// session is left in backup mode; a backup of a new ID then completes
// (pgBackRest resumes or removes the cut one, nothing else is left in the
// repository) and counts, and a new instance restored from it has every
// row.
func TestBaseBackupCutShortNeverCounts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and an object store; skipped under -short")
	}
	c := newCluster(t)
	f := newArchiveFixture(t, c)
	ctx := context.Background()
	const repoPath = "/dbkeeper/ns/cut/uid-1"
	a := c.startArchiving(t, f.env(t, repoPath))

	// enough data that the copy takes seconds: about 240 MB of hex text.
	const rows = 2_500_000
	conn := sql(t, a)
	loaded := time.Now()
	mustExec(t, conn, "CREATE TABLE ledger AS SELECT g AS id, md5(g::text) || md5((-g)::text) AS note FROM generate_series(1, $1) g", rows)
	t.Logf("loaded %d MB in %s", count(t, conn, "SELECT (pg_total_relation_size('ledger') >> 20)::int"), time.Since(loaded).Round(time.Millisecond))
	relPath := stringQuery(t, conn, "SELECT pg_relation_filepath('ledger')")
	archivedNow(t, c, a, conn)

	// the full backup, cut while pgBackRest copies: once the table's file
	// (the largest, copied first) is in the repository, so that the next
	// backup may reuse it, and the small files are still to come.
	_, err := c.client.Backup(ctx, a.url, agentapi.BackupRequest{ID: "cut", Type: "full"})
	require.NoError(t, err)
	backups := strings.TrimPrefix(repoPath, "/") + "/backup/" + agentapi.Stanza + "/"
	var copier int
	var copied []string
	deadline := time.Now().Add(2 * time.Minute)
	for {
		s := c.status(a)
		require.NotNil(t, s.Archive.Run)
		require.Nil(t, s.Archive.Run.Finished, "the backup ended before it was cut (%q): the test proves nothing", s.Archive.Run.Error)
		copier = backupProcess(a.cmd.Process.Pid)
		keys, err := f.store.List(ctx, f.bucket, backups)
		require.NoError(t, err)
		copied = slices.DeleteFunc(keys, func(k string) bool { return !strings.Contains(k, "/pg_data/") })
		if copier > 0 && slices.ContainsFunc(copied, func(k string) bool { return strings.Contains(k, "/pg_data/"+relPath+".") }) {
			break
		}
		require.True(t, time.Now().Before(deadline), "pgBackRest did not copy the table")
		time.Sleep(20 * time.Millisecond)
	}
	oldServer := postmasterPID(a.pgdata)
	killed := killTree(t, a.cmd.Process.Pid)
	t.Logf("cut with %d files of the data directory in the repository (pgbackrest backup: pid %d)", len(copied), copier)
	assert.Contains(t, killed, copier, "the pgbackrest backup was not among the agent's processes")
	assert.Contains(t, killed, oldServer, "the postmaster was not among the agent's processes")
	<-a.exited
	cutLabels := backupLabels(t, f, repoPath)
	require.Len(t, cutLabels, 1, "the cut backup left no files in the repository: the test proves nothing")
	recordPath := filepath.Join(a.dir, "dbkeeper-backup.json")
	record := readBackupRun(t, recordPath)
	require.Equal(t, "cut", record.ID)
	require.Nil(t, record.Finished, "the record of a backup cut short already says it finished")

	// the agent again, on the same data directory.
	a = c.start("db-0", f.env(t, repoPath))
	s := c.waitStatus(a, 2*time.Minute, "a primary that read the repository", func(s agentapi.Status) bool {
		return runningAs(agentapi.RolePrimary)(s) && s.Archive != nil && s.Archive.StanzaReady && s.Archive.ArchiveMax != ""
	})
	assert.NotEqual(t, oldServer, postmasterPID(a.pgdata))
	assert.Empty(t, s.Archive.InfoError)
	assert.Empty(t, s.Archive.Backups, "the backup cut short counts as a base backup")
	require.NotNil(t, s.Archive.Run)
	assert.Equal(t, "cut", s.Archive.Run.ID)
	assert.NotNil(t, s.Archive.Run.Finished, "the run cut short is reported running: the operator waits for it for ever")
	assert.Contains(t, s.Archive.Run.Error, "interrupted", "the run cut short is not reported failed")
	t.Logf("the cut run after the restart: %s", s.Archive.Run.Error)
	record = readBackupRun(t, recordPath)
	assert.NotNil(t, record.Finished, "the record of the cut run still reads unfinished")
	assert.NotEmpty(t, record.Error, "the record of the cut run reads as a success")

	// its ID asked again: the failed run, not a success nor a new run.
	again, err := c.client.Backup(ctx, a.url, agentapi.BackupRequest{ID: "cut", Type: "full"})
	require.NoError(t, err)
	assert.NotEmpty(t, again.Error, "asking again for the cut backup claims a success")
	assert.NotNil(t, again.Finished, "asking again for the cut backup says it runs")
	assert.Equal(t, s.Archive.Run.Started.Unix(), again.Started.Unix(), "asking again for the cut backup started another")

	// PostgreSQL is out of backup mode: the backup's session died with
	// pgBackRest, no exclusive backup's label is left.
	conn = sql(t, a)
	assert.Equal(t, 0, count(t, conn, "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND query ~* 'pg_(backup_start|start_backup)'"))
	for _, name := range []string{"backup_label", "tablespace_map"} {
		assert.NoFileExists(t, filepath.Join(a.pgdata, name))
	}

	// a backup of a new ID completes and counts.
	mustExec(t, conn, "CREATE TABLE after_cut AS SELECT generate_series(1, 100) AS id")
	_, err = c.client.Backup(ctx, a.url, agentapi.BackupRequest{ID: "whole", Type: "full"})
	require.NoError(t, err)
	s = c.waitBaseBackups(a, 1)
	assert.Equal(t, "whole", s.Archive.Run.ID)
	assert.Equal(t, "full", s.Archive.Backups[0].Type)
	label := s.Archive.Backups[0].Label
	t.Logf("counted: %s (the cut one: %v)", label, cutLabels)
	for _, w := range backupWarnings(t, a) {
		t.Logf("pgBackRest: %s", w) // "resumable backup ... the backup will resume", or why it could not
	}
	assert.Equal(t, []string{label}, backupLabels(t, f, repoPath), "files of another backup than the one counted are left in the repository")
	mustExec(t, conn, "INSERT INTO after_cut SELECT generate_series(101, 150)")
	archivedNow(t, c, a, conn)

	// a new instance restored from it has every row.
	b := c.start("db-1")
	_, err = c.client.Bootstrap(ctx, b.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapRestore,
		Recovery: f.recoverySource(repoPath, agentapi.RecoveryTarget{})})
	require.NoError(t, err)
	c.waitStatus(b, 3*time.Minute, "restored and promoted", runningAs(agentapi.RolePrimary))
	restored := sql(t, b)
	assert.Equal(t, rows, count(t, restored, "SELECT count(*) FROM ledger"))
	assert.Equal(t, rows, count(t, restored, "SELECT count(*) FROM ledger WHERE note = md5(id::text) || md5((-id)::text)"))
	assert.Equal(t, 150, count(t, restored, "SELECT count(*) FROM after_cut"))
}

// backupLabels are the backups of which the repository at path holds
// files, counted or not.
func backupLabels(t *testing.T, f *archiveFixture, path string) []string {
	t.Helper()
	prefix := strings.TrimPrefix(path, "/") + "/backup/" + agentapi.Stanza + "/"
	keys, err := f.store.List(context.Background(), f.bucket, prefix)
	require.NoError(t, err)
	var labels []string
	for _, k := range keys {
		dir, _, ok := strings.Cut(strings.TrimPrefix(k, prefix), "/")
		if ok && dir != "backup.history" && !slices.Contains(labels, dir) {
			labels = append(labels, dir)
		}
	}
	return labels
}

// backupWarnings are the WARN lines of the pgbackrest backups the agents
// of in ran (their file logs, in each agent's runtime directory).
func backupWarnings(t *testing.T, in *instance) []string {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(in.dir, "tmp", "dbkeeper-pgbackrest-*", agentapi.Stanza+"-backup.log"))
	require.NoError(t, err)
	var out []string
	for _, l := range logs {
		b, err := os.ReadFile(l)
		require.NoError(t, err)
		for _, line := range strings.Split(string(b), "\n") {
			if _, w, ok := strings.Cut(line, "WARN: "); ok {
				out = append(out, w)
			}
		}
	}
	return out
}

// readBackupRun reads the agent's persisted BackupRun.
func readBackupRun(t *testing.T, path string) agentapi.BackupRun {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var run agentapi.BackupRun
	require.NoError(t, json.Unmarshal(b, &run), "%s", b)
	return run
}

// backupProcess is the pid of a `pgbackrest ... backup` under the agent
// pid, 0 when there is none.
func backupProcess(agentPID int) int {
	for _, p := range faults.Descendants(agentPID) {
		args := strings.Fields(faults.Cmdline(p))
		if len(args) == 0 || filepath.Base(args[0]) != "pgbackrest" {
			continue
		}
		for _, a := range args[1:] {
			if a == "backup" {
				return p
			}
		}
	}
	return 0
}

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER.
const prSetChildSubreaper = 36

// killTree kills root and every process under it at once, as a
// container's kill does: each is stopped first (a stopped process forks
// no more, and its children stay its own), until a walk of the tree finds
// no new one, then all get SIGKILL. Meanwhile the test process is their
// subreaper, so that it reaps them: a container's processes leave no
// zombie behind, and a zombie postmaster would pass for a running one
// ("lock file already exists"). It returns their pids once they are gone.
// Only the test's own agent's tree is touched.
func killTree(t *testing.T, root int) []int {
	t.Helper()
	stopped := map[int]bool{}
	require.NoError(t, syscall.Kill(root, syscall.SIGSTOP))
	stopped[root] = true
	for found := true; found; {
		found = false
		for _, p := range faults.Descendants(root) {
			if !stopped[p] && syscall.Kill(p, syscall.SIGSTOP) == nil {
				stopped[p], found = true, true
			}
		}
	}
	_, _, errno := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0, 0, 0, 0)
	require.Zero(t, errno, "prctl(PR_SET_CHILD_SUBREAPER)")
	defer syscall.RawSyscall6(syscall.SYS_PRCTL, prSetChildSubreaper, 0, 0, 0, 0, 0)
	pids := make([]int, 0, len(stopped))
	names := map[string]int{}
	for p := range stopped {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p))
		names[strings.TrimSpace(string(comm))]++
		_ = syscall.Kill(p, syscall.SIGKILL)
		pids = append(pids, p)
	}
	t.Logf("SIGKILL to %d processes: %v", len(pids), names)
	waitFor(t, func() bool {
		gone := true
		for _, p := range pids {
			if p != root { // exec.Cmd.Wait reaps the agent
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(p, &ws, syscall.WNOHANG, nil)
			}
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", p)); err == nil {
				gone = false
			}
		}
		return gone
	}, 30*time.Second, "the killed processes reaped")
	return pids
}
