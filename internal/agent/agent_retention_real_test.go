package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// TestRecoveryWindowKeepsEveryPointInsideIt: the primary's agent expires
// the repository to a recovery window of 30 s, with a real pgBackRest and
// object store, while a ledger gets a row every 200 ms (its commit time
// kept: track_commit_timestamp).
//
//   - Full backup A, then, once A is outside the window, an incremental
//     A1 (after which the agent expires): A is the only full backup and
//     the newest before the window's start, so nothing is removed, not
//     A, not A1, not a WAL segment from A's start on.
//   - Full backup B; once B is outside the window, full backup D (inside
//     it; the agent expires after it). The window's start W is the
//     expiry's time (Status.Archive.ExpiredAt) less 30 s. Then A and A1
//     and every WAL segment before B's start are gone from the store's
//     files; B, D and every segment from B's start to the last archived
//     one remain.
//   - New instances restored to the commit time of the first row
//     committed after W (a point pgBackRest restores from B, the newest
//     backup stopped before it) and of the last row each have exactly the
//     rows committed at or before their target.
func TestRecoveryWindowKeepsEveryPointInsideIt(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and an object store; skipped under -short")
	}
	const window = 30 * time.Second
	c := newCluster(t)
	f := newArchiveFixture(t, c)
	ctx := context.Background()
	const repoPath = "/dbkeeper/ns/ledger/uid-1"
	repo := f.repository(repoPath)
	repo.RecoveryWindow = window
	raw, err := json.Marshal(repo)
	require.NoError(t, err)
	a := c.startArchiving(t, agentapi.EnvRepository+"="+string(raw))
	conn := sql(t, a)
	mustExec(t, conn, "CREATE TABLE ledger (id bigserial PRIMARY KEY)")

	// the ledger's writer, one row (one transaction) every 200 ms.
	writer := sql(t, a)
	stop, written := make(chan struct{}), make(chan error, 1)
	go func(stop <-chan struct{}) {
		for {
			select {
			case <-stop:
				written <- nil
				return
			case <-time.After(200 * time.Millisecond):
			}
			if _, err := writer.Exec(ctx, "INSERT INTO ledger DEFAULT VALUES"); err != nil {
				written <- err
				return
			}
		}
	}(stop)
	stopped := false
	stopWriter := func() {
		if !stopped {
			stopped = true
			close(stop)
			require.NoError(t, <-written, "the ledger's writer")
		}
	}
	defer stopWriter()

	// backup runs a base backup through the agent and returns it, with
	// the status once the agent's expiry after it has run.
	labels := func(s agentapi.Status) []string {
		var l []string
		for _, b := range s.Archive.Backups {
			l = append(l, b.Label)
		}
		return l
	}
	backup := func(id, typ string) (agentapi.BaseBackup, agentapi.Status) {
		t.Helper()
		_, err := c.client.Backup(ctx, a.url, agentapi.BackupRequest{ID: id, Type: typ})
		require.NoError(t, err)
		s := c.waitStatus(a, 2*time.Minute, "base backup "+id+" finished", func(s agentapi.Status) bool {
			return s.Archive != nil && s.Archive.Run != nil && s.Archive.Run.ID == id && s.Archive.Run.Finished != nil
		})
		require.Empty(t, s.Archive.Run.Error)
		finished := s.Archive.Run.Finished
		s = c.waitStatus(a, 90*time.Second, "the expiry after backup "+id, func(s agentapi.Status) bool {
			return s.Archive.ExpiredAt != nil && !s.Archive.ExpiredAt.Before(finished)
		})
		require.Empty(t, s.Archive.ExpireError)
		b := s.Archive.Backups[len(s.Archive.Backups)-1]
		require.Equal(t, typ, b.Type)
		t.Logf("backup %s: %s %s, stopped %s, WAL %s-%s; expired at %s",
			id, b.Type, b.Label, b.Finished.UTC().Format(time.RFC3339), b.StartWAL, b.StopWAL, s.Archive.ExpiredAt.UTC().Format(time.RFC3339))
		return b, s
	}
	// outside waits until a backup that stopped at stopped is outside the
	// window: its second ended more than the window ago.
	outside := func(stopped time.Time) {
		time.Sleep(time.Until(stopped.Add(time.Second + window + time.Second)))
	}

	// the only full backup, outside the window: nothing goes.
	fullA, _ := backup("a", "full")
	segmentsA := archivedSegments(t, f, repoPath)
	outside(fullA.Finished.Time)
	incrA1, s := backup("a1", "incr")
	assert.Equal(t, []string{fullA.Label, incrA1.Label}, labels(s), "an expiry removed the only full backup, outside the window")
	assert.ElementsMatch(t, []string{fullA.Label, incrA1.Label}, backupLabels(t, f, repoPath))
	after := archivedSegments(t, f, repoPath)
	for _, seg := range segmentsA {
		if seg >= fullA.StartWAL {
			assert.Contains(t, after, seg, "a segment from the only full backup's start on was removed")
		}
	}

	// B, then B outside the window and D inside it.
	fullB, _ := backup("b", "full")
	segments := archivedSegments(t, f, repoPath)
	require.NotEmpty(t, segments)
	require.Less(t, segments[0], fullB.StartWAL, "no segment before B's start: the test proves nothing of the archive's expiry")
	outside(fullB.Finished.Time)
	fullD, s := backup("d", "full")
	expired := s.Archive.ExpiredAt.Time
	// ExpiredAt is in whole seconds (truncated): the window's start is
	// within the second after expired - window.
	windowStart := expired.Add(-window)
	require.False(t, fullB.Finished.Add(time.Second).After(windowStart), "B stopped inside the window of the expiry at %s: the test proves nothing", expired)

	// (1) A, A1 and the WAL before B's start are gone; (2) B, D and the
	// WAL from B's start on remain, in the store's files and in what
	// pgbackrest info says.
	assert.Equal(t, []string{fullB.Label, fullD.Label}, labels(s))
	assert.ElementsMatch(t, []string{fullB.Label, fullD.Label}, backupLabels(t, f, repoPath))
	segments = archivedSegments(t, f, repoPath)
	require.NotEmpty(t, segments)
	assert.Equal(t, fullB.StartWAL, segments[0], "the oldest segment left is not B's first")
	assert.Equal(t, fullB.StartWAL, s.Archive.ArchiveMin)
	for i := 1; i < len(segments); i++ {
		assert.Equal(t, nextSegment(t, segments[i-1]), segments[i], "a hole in the archive after B's start")
	}
	assert.GreaterOrEqual(t, segments[len(segments)-1], fullD.StopWAL)

	// (3) restores to a point just inside the window and to a recent one.
	var first int64
	var t1 time.Time
	require.NoError(t, conn.QueryRow(ctx, `SELECT id, pg_xact_commit_timestamp(xmin) FROM ledger
		WHERE pg_xact_commit_timestamp(xmin) > $1 ORDER BY id LIMIT 1`, windowStart.Add(time.Second)).Scan(&first, &t1))
	require.True(t, t1.Before(fullD.Finished.Time), "the first point of the window is after D stopped: it does not need B")
	time.Sleep(time.Second)
	stopWriter()
	var t2 time.Time
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_xact_commit_timestamp(xmin) FROM ledger ORDER BY id DESC LIMIT 1`).Scan(&t2))
	// a row after the last target: a recovery to a time stops at the
	// first commit after it, and fails at the end of the archive without
	// one.
	mustExec(t, conn, "INSERT INTO ledger DEFAULT VALUES")
	archivedNow(t, c, a, conn)
	t.Logf("window start %s; targets: row %d at %s (needs B), the writer's last row at %s",
		windowStart.UTC().Format(time.RFC3339Nano), first, t1.UTC().Format(time.RFC3339Nano), t2.UTC().Format(time.RFC3339Nano))

	// the rows each restore must have, then the source stops: its next
	// expiries would move the window on while the restores read it.
	targets := []time.Time{t1, t2}
	want := make([][]int64, len(targets))
	for i, target := range targets {
		require.NoError(t, conn.QueryRow(ctx, `SELECT array_agg(id ORDER BY id) FROM ledger WHERE pg_xact_commit_timestamp(xmin) <= $1`, target).Scan(&want[i]))
		require.NotEmpty(t, want[i])
	}
	rows := count(t, conn, "SELECT count(*) FROM ledger")
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	<-a.exited
	assert.ElementsMatch(t, []string{fullB.Label, fullD.Label}, backupLabels(t, f, repoPath))

	restored := make([]*instance, len(targets))
	for i, target := range targets {
		restored[i] = c.start([]string{"db-1", "db-2"}[i])
		_, err := c.client.Bootstrap(ctx, restored[i].url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapRestore,
			Recovery: f.recoverySource(repoPath, agentapi.RecoveryTarget{Time: target.Format(time.RFC3339Nano)})})
		require.NoError(t, err)
	}
	for i, target := range targets {
		c.waitStatus(restored[i], 3*time.Minute, "recovered and promoted", runningAs(agentapi.RolePrimary))
		var got []int64
		require.NoError(t, sql(t, restored[i]).QueryRow(ctx, `SELECT array_agg(id ORDER BY id) FROM ledger`).Scan(&got))
		assert.Equal(t, want[i], got, "the rows restored to %s", target.UTC().Format(time.RFC3339Nano))
		t.Logf("restored to %s: rows 1-%d of %d", target.UTC().Format(time.RFC3339Nano), got[len(got)-1], rows)
	}
	for _, command := range []string{"backup", "expire"} {
		for _, w := range slices.Compact(pgbackrestWarnings(t, a, command)) {
			t.Logf("pgBackRest's %s warned: %s", command, w)
		}
	}
}

// segmentName is a WAL segment's file in a pgBackRest archive (its
// name, then the checksum and the compression's extension).
var segmentName = regexp.MustCompile(`^([0-9A-F]{24})-[0-9a-f]{40}`)

// archivedSegments are the WAL segments in the archive of the repository
// at path, from the store's files, sorted.
func archivedSegments(t *testing.T, f *archiveFixture, path string) []string {
	t.Helper()
	keys, err := f.store.List(context.Background(), f.bucket, strings.TrimPrefix(path, "/")+"/archive/")
	require.NoError(t, err)
	var segs []string
	for _, k := range keys {
		if m := segmentName.FindStringSubmatch(k[strings.LastIndex(k, "/")+1:]); m != nil {
			segs = append(segs, m[1])
		}
	}
	slices.Sort(segs)
	return slices.Compact(segs)
}

// nextSegment is the segment after seg, of 16 MiB segments.
func nextSegment(t *testing.T, seg string) string {
	t.Helper()
	var tli, log, n uint32
	_, err := fmt.Sscanf(seg, "%08X%08X%08X", &tli, &log, &n)
	require.NoError(t, err, seg)
	if n++; n == 0x100 {
		log, n = log+1, 0
	}
	return fmt.Sprintf("%08X%08X%08X", tli, log, n)
}

// pgbackrestWarnings are the WARN lines of the file logs of the agent's
// pgbackrest command (backup, expire) in its runtime directories.
func pgbackrestWarnings(t *testing.T, in *instance, command string) []string {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(in.dir, "tmp", "dbkeeper-pgbackrest-*", agentapi.Stanza+"-"+command+".log"))
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
