package agent_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/test/framework"
	"github.com/dbkeeper/dbkeeper/test/framework/postgres"
)

// The flags of BenchmarkBackup (make bench-backup passes them after -args).
var (
	benchSize         = byteSize(1 << 30)
	benchReport       = flag.String("report", "", "BenchmarkBackup: the Markdown file to write the figures into; empty writes none")
	benchSteady       = flag.Duration("steady", time.Minute, "BenchmarkBackup: how long the steady writer commits on each server")
	benchQuietSamples = flag.Int("quiet-samples", 20, "BenchmarkBackup: single commits on each quiet server")
)

func init() {
	flag.Var(&benchSize, "size", "BenchmarkBackup: the data of the base backup, and the WAL written after it (KiB, MiB, GiB)")
}

const (
	// benchArchiveTimeout is archive_timeout on both servers: it bounds
	// the lag of a quiet database.
	benchArchiveTimeout = 10 * time.Second
	// commitEvery and steadyPayload are the steady writer's: a row of
	// 32 KiB of random bytes every 10 ms is about 3.2 MB/s of WAL, a
	// segment filled every 5 s, before archive_timeout would switch it.
	commitEvery   = 10 * time.Millisecond
	steadyPayload = 32 << 10
	// archivePoll is how often pg_stat_archiver is read.
	archivePoll = 5 * time.Millisecond
	// benchSourcePath and benchTargetPath are the repositories of the
	// primary and of the instance the agent restores.
	benchSourcePath, benchTargetPath = "/dbkeeper/bench/source/uid-1", "/dbkeeper/bench/restored/uid-2"
)

// byteSize is a flag of a number of bytes with an optional unit.
type byteSize int64

func (s *byteSize) String() string { return formatBytes(int64(*s)) }

// Set reads 1GiB, 64MiB, 512KiB or a plain number of bytes.
func (s *byteSize) Set(v string) error {
	for _, u := range []struct {
		suffix string
		n      float64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if num, ok := strings.CutSuffix(v, u.suffix); ok {
			f, err := strconv.ParseFloat(num, 64)
			if err != nil || f <= 0 {
				return fmt.Errorf("%q is not a positive size", v)
			}
			*s = byteSize(f * u.n)
			return nil
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return fmt.Errorf("%q is not a positive size (a number of bytes, or with KiB, MiB, GiB)", v)
	}
	*s = byteSize(n)
	return nil
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<30:
		return fmt.Sprintf("%.2fGiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
}

// lagStats summarizes the lags from commits to their segments archived.
type lagStats struct {
	// Commits is the number of samples, Segments of segments they were in.
	Commits, Segments int
	// Bounded counts the commits whose segment the poll of
	// pg_stat_archiver did not see as the last archived (a later segment
	// was archived within the same 5 ms): their lag is the archive time
	// of the next segment seen, an upper bound.
	Bounded       int
	P50, P99, Max time.Duration
	// Pushes counts the segments whose completion the clock read (the
	// modification time of archive_status/<seg>.done); PushP50 and
	// PushP99 are their times from completed to archived: archive_command
	// alone, without the wait for the segment to fill or to time out.
	Pushes           int
	PushP50, PushP99 time.Duration
}

// timing is one copy or restore: how long it took and what it moved.
type timing struct {
	// Took is the whole run; Copy, for a restore, the pgbackrest restore
	// part of it (the rest is the server's replay up to its promotion).
	Took, Copy time.Duration
	// Bytes is what the run wrote (a pg_basebackup's output), when known.
	Bytes int64
	// Start, for a restore, is when it began, and Server when its server
	// logged the phases of its recovery.
	Start  time.Time
	Server recoveryLog
}

// backupBench holds the figures of one run of BenchmarkBackup.
type backupBench struct {
	// Started and Finished bound the run; LoadBefore and LoadAfter are
	// the machine's load averages then.
	Started, Finished     time.Time
	LoadBefore, LoadAfter string
	// SteadyFloor and SteadyAgent are the lags under the steady writer,
	// QuietFloor and QuietAgent of single commits on a quiet server.
	SteadyFloor, SteadyAgent, QuietFloor, QuietAgent lagStats
	// DataBytes is the cluster pgBackRest backed up (its info's size),
	// RepoBytes what it stored, DatabaseBytes pg_database_size of all
	// databases.
	DataBytes, RepoBytes, DatabaseBytes int64
	// BasePlain and BaseTar are pg_basebackup -Fp and -Ft to a local
	// directory; BaseAgent the agent's full backup into the store, of
	// which pgbackrest info's start and stop times (whole seconds) say
	// BackupInfoTook.
	BasePlain, BaseTar, BaseAgent timing
	BackupInfoTook                time.Duration
	// WALBytes is the WAL written after the base backup, RowsAfter the
	// rows it inserted, which each restore must have.
	WALBytes  int64
	RowsAfter int
	// RestoresByHand are pgbackrest restore and the server started on its
	// data directory until promoted; RestoresAgent the agent's restore
	// bootstrap until it reports a running primary. Each has two, run in
	// the order by hand, agent, agent, by hand.
	RestoresByHand, RestoresAgent []timing
	// RestoreCommand is the restore_command pgbackrest restore wrote for
	// the run by hand.
	RestoreCommand string
}

// BenchmarkBackup measures, in one run, the agent's archiving, base
// backup and restore through pgBackRest into versitygw, each against a
// floor on this machine: archive lag against `cp` to a local directory,
// the base backup against pg_basebackup to a local directory, and the
// restore bootstrap against the same pgbackrest restore run by hand. With
// -report it writes the figures (make bench-backup: docs/benchmarks-backup.md).
// One run is one sample of each figure: run it with -benchtime=1x.
func BenchmarkBackup(b *testing.B) {
	if b.N != 1 {
		b.Fatal("run with -benchtime=1x (make bench-backup): one run of each phase is the sample")
	}
	var r backupBench
	// The helpers of this package's tests (the agents, the store) take a
	// *testing.T; RunTests gives the measurement one, with its cleanups,
	// whatever -run says (make bench-backup runs no test: -run '^$').
	ok := testing.RunTests(func(string, string) (bool, error) { return true, nil },
		[]testing.InternalTest{{Name: "BackupBenchmark", F: r.run}})
	if !ok {
		b.Fatal("the backup benchmark failed: its log is above")
	}
	b.ReportMetric(ratio(r.SteadyAgent.P50, r.SteadyFloor.P50), "steady-lag-p50-ratio")
	b.ReportMetric(ratio(r.QuietAgent.P50, r.QuietFloor.P50), "quiet-lag-p50-ratio")
	b.ReportMetric(ratio(r.SteadyAgent.PushP50, r.SteadyFloor.PushP50), "push-p50-ratio")
	b.ReportMetric(ratio(r.BaseAgent.Took, min(r.BasePlain.Took, r.BaseTar.Took)), "basebackup-time-ratio")
	b.ReportMetric(ratio(total(r.RestoresAgent), total(r.RestoresByHand)), "restore-time-ratio")
	if *benchReport != "" {
		if err := os.WriteFile(*benchReport, []byte(r.markdown()), 0o644); err != nil {
			b.Fatal(err)
		}
		b.Logf("wrote %s", *benchReport)
	}
}

func ratio(a, floor time.Duration) float64 { return a.Seconds() / floor.Seconds() }

// total is the time of runs together.
func total(runs []timing) time.Duration {
	var d time.Duration
	for _, r := range runs {
		d += r.Took
	}
	return d
}

// run measures everything on one agent's primary (db-0, archiving into the
// store) and one plain server archiving with cp.
func (r *backupBench) run(t *testing.T) {
	r.Started, r.LoadBefore = time.Now(), loadAverage()
	size := int64(benchSize)
	ctx := context.Background()
	c := newCluster(t) // fails without PostgreSQL
	for _, tool := range []string{"pg_basebackup", "postgres"} {
		_, err := os.Stat(filepath.Join(c.pgBin, tool))
		require.NoError(t, err, "%s is not in %s: apt-get install postgresql", tool, c.pgBin)
	}
	f := newArchiveFixture(t, c) // fails without pgbackrest or versitygw

	source := f.repository(benchSourcePath)
	source.ArchiveTimeout = benchArchiveTimeout
	a := c.start("db-0", repositoryEnv(t, source))
	_, err := c.client.Bootstrap(ctx, a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	c.waitStatus(a, 2*time.Minute, "the repository ready", func(s agentapi.Status) bool {
		return runningAs(agentapi.RolePrimary)(s) && s.Archive != nil && s.Archive.StanzaReady
	})

	// the floor: a server of the same binaries and settings, archiving
	// with cp into a directory on the same file system.
	floor := postgres.StartWith(t, postgres.Options{Prepare: func(dir string, uid, gid int) []string {
		archive := filepath.Join(dir, "archive")
		require.NoError(t, os.Mkdir(archive, 0o700))
		require.NoError(t, os.Chown(archive, uid, gid))
		return []string{"-c", "archive_mode=on", "-c", "archive_command=cp %p " + archive + "/%f",
			"-c", "archive_timeout=" + strconv.Itoa(int(benchArchiveTimeout/time.Second)),
			"-c", "wal_log_hints=on", "-c", "track_commit_timestamp=on"}
	}})
	// PostgreSQL 15's checkpointer takes its first sleep during startup,
	// while recovery is in progress, when archive_timeout does not shorten
	// it: a server nothing wakes applies archive_timeout only from its
	// first timed checkpoint (checkpoint_timeout, 5 min). The agent's
	// server is woken by the reload of its new pg_hba.conf; the floor's
	// by this one.
	floor.SQL(t, "postgres", "ALTER ROLE postgres PASSWORD '"+superPassword+"'; SELECT pg_reload_conf()")
	floorServer := &instance{name: "floor", port: floor.Port}

	r.measureArchiveLag(t, a, floorServer)
	r.measureBaseBackup(t, c, a, size)
	r.measureRestore(t, c, f, a, size)
	r.Finished, r.LoadAfter = time.Now(), loadAverage()
}

// repositoryEnv is the agent's environment variable of repo.
func repositoryEnv(t *testing.T, repo agentapi.Repository) string {
	raw, err := json.Marshal(repo)
	require.NoError(t, err)
	return agentapi.EnvRepository + "=" + string(raw)
}

// measureArchiveLag runs the steady writer on the floor, then on the
// agent's primary, then single commits on both at once (they wait on
// archive_timeout, not on the machine).
func (r *backupBench) measureArchiveLag(t *testing.T, a, floor *instance) {
	ctx := context.Background()
	var err error
	t.Logf("archive lag under a steady writer for %s on each server", *benchSteady)
	// each clock polls only while its server is measured
	clock := startArchiveClock(t, floor)
	r.SteadyFloor, err = steadyLag(ctx, sql(t, floor), clock, *benchSteady)
	clock.close()
	require.NoError(t, err, "the floor's steady writer")
	clock = startArchiveClock(t, a)
	r.SteadyAgent, err = steadyLag(ctx, sql(t, a), clock, *benchSteady)
	clock.close()
	require.NoError(t, err, "the agent's steady writer")

	t.Logf("archive lag of %d single commits on each quiet server", *benchQuietSamples)
	floorConn, floorClock := sql(t, floor), startArchiveClock(t, floor)
	agentConn, agentClock := sql(t, a), startArchiveClock(t, a)
	var wg sync.WaitGroup
	var floorErr, agentErr error
	wg.Go(func() { r.QuietFloor, floorErr = quietLag(ctx, floorConn, floorClock, *benchQuietSamples) })
	wg.Go(func() { r.QuietAgent, agentErr = quietLag(ctx, agentConn, agentClock, *benchQuietSamples) })
	wg.Wait()
	floorClock.close()
	agentClock.close()
	require.NoError(t, floorErr, "the floor's quiet commits")
	require.NoError(t, agentErr, "the agent's quiet commits")
	// the base backup holds the data of -size, not these rows as well
	mustExec(t, agentConn, "DROP TABLE bench_steady, bench_quiet")
}

// archiveClock records when each WAL segment was archived: it polls the
// server's pg_stat_archiver (last_archived_wal, and last_archived_time,
// which the archiver sets once archive_command returned 0: for the agent,
// once pgbackrest archive-push has stored the segment) every archivePoll,
// on a connection of its own. It also reads when each segment it sees was
// completed: the modification time of its archive_status/<seg>.done,
// which was the .ready file PostgreSQL created then (a rename keeps it).
type archiveClock struct {
	mu        sync.Mutex
	segs      []string // increasing
	at        []time.Time
	completed []time.Time // zero when unknown
	err       error

	stop context.CancelFunc
	done chan struct{}
}

func startArchiveClock(t *testing.T, in *instance) *archiveClock {
	conn := sql(t, in)
	status := filepath.Join(stringQuery(t, conn, "SHOW data_directory"), "pg_wal", "archive_status")
	ctx, cancel := context.WithCancel(context.Background())
	c := &archiveClock{stop: cancel, done: make(chan struct{})}
	t.Cleanup(c.close) // before sql's cleanup closes the connection
	go func() {
		defer close(c.done)
		for {
			var seg string
			var at *time.Time
			err := conn.QueryRow(ctx, "SELECT COALESCE(last_archived_wal, ''), last_archived_time FROM pg_stat_archiver").Scan(&seg, &at)
			c.mu.Lock()
			switch {
			case ctx.Err() != nil:
			case err != nil:
				c.err = fmt.Errorf("reading pg_stat_archiver: %w", err)
			case len(seg) == 24 && at != nil && (len(c.segs) == 0 || seg > c.segs[len(c.segs)-1]):
				// a segment, not a history or backup file
				var completed time.Time
				if info, err := os.Stat(filepath.Join(status, seg+".done")); err == nil {
					completed = info.ModTime()
				}
				c.segs, c.at, c.completed = append(c.segs, seg), append(c.at, *at), append(c.completed, completed)
			}
			stop := ctx.Err() != nil || c.err != nil
			c.mu.Unlock()
			if stop {
				return
			}
			time.Sleep(archivePoll)
		}
	}()
	return c
}

// close stops the clock's poll (again: nothing); what it saw stays.
func (c *archiveClock) close() {
	c.stop()
	<-c.done
}

// archived says when seg was archived: at the time of the first segment
// seen at or after it (segments are archived in order), exact when that
// is seg itself.
func (c *archiveClock) archived(seg string) (at time.Time, exact, ok bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := sort.SearchStrings(c.segs, seg)
	if i == len(c.segs) {
		return time.Time{}, false, false, c.err
	}
	return c.at[i], c.segs[i] == seg, true, nil
}

// push is how long seg took from its completion to its archive, when the
// clock saw both.
func (c *archiveClock) push(seg string) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := sort.SearchStrings(c.segs, seg)
	if i == len(c.segs) || c.segs[i] != seg || c.completed[i].IsZero() {
		return 0, false
	}
	return c.at[i].Sub(c.completed[i]), true
}

// wait waits until seg was archived.
func (c *archiveClock) wait(ctx context.Context, seg string, timeout time.Duration) (time.Time, bool, error) {
	deadline := time.Now().Add(timeout)
	for {
		at, exact, ok, err := c.archived(seg)
		switch {
		case err != nil:
			return time.Time{}, false, err
		case ok:
			return at, exact, nil
		case time.Now().After(deadline):
			return time.Time{}, false, fmt.Errorf("segment %s not archived within %s", seg, timeout)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, false, ctx.Err()
		case <-time.After(archivePoll):
		}
	}
}

// commit is a committed transaction: the segment of its commit record,
// and when it had committed (the server's clock, as pg_stat_archiver's).
type commit struct {
	seg string
	at  time.Time
}

// lastCommit is the segment PostgreSQL inserts into now, just after a
// commit on conn; the segment of an insert position on a boundary is the
// one before it.
func lastCommit(ctx context.Context, conn *pgx.Conn) (commit, error) {
	var c commit
	err := conn.QueryRow(ctx, "SELECT pg_walfile_name(pg_current_wal_insert_lsn()), clock_timestamp()").Scan(&c.seg, &c.at)
	return c, err
}

// steadyLag commits a row of steadyPayload random bytes every commitEvery
// for d on conn, and says how long each commit took to be archived. The
// commits of the segment still open when the writer stops are left out:
// archive_timeout, not the load, would end it.
func steadyLag(ctx context.Context, conn *pgx.Conn, clock *archiveClock, d time.Duration) (lagStats, error) {
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS bench_steady (id bigserial PRIMARY KEY, payload bytea)"); err != nil {
		return lagStats{}, err
	}
	payload := make([]byte, steadyPayload)
	var commits []commit
	tick := time.NewTicker(commitEvery)
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
		_, _ = rand.Read(payload)
		if _, err := conn.Exec(ctx, "INSERT INTO bench_steady (payload) VALUES ($1)", payload); err != nil {
			return lagStats{}, err
		}
		c, err := lastCommit(ctx, conn)
		if err != nil {
			return lagStats{}, err
		}
		commits = append(commits, c)
	}
	open, err := lastCommit(ctx, conn)
	if err != nil {
		return lagStats{}, err
	}
	var closed []commit
	for _, c := range commits {
		if c.seg < open.seg {
			closed = append(closed, c)
		}
	}
	if len(closed) == 0 {
		return lagStats{}, errors.New("the steady writer filled no segment: run it longer (-steady)")
	}
	if _, _, err := clock.wait(ctx, closed[len(closed)-1].seg, 5*time.Minute); err != nil {
		return lagStats{}, err
	}
	return lags(clock, closed)
}

// quietLag makes n single commits on conn, each after a random pause
// within archive_timeout once the one before was archived, and says how
// long each took to be archived.
func quietLag(ctx context.Context, conn *pgx.Conn, clock *archiveClock, n int) (lagStats, error) {
	if n < 1 {
		return lagStats{}, errors.New("-quiet-samples must be at least 1")
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS bench_quiet (at timestamptz)"); err != nil {
		return lagStats{}, err
	}
	var commits []commit
	for range n {
		time.Sleep(mrand.N(benchArchiveTimeout))
		if _, err := conn.Exec(ctx, "INSERT INTO bench_quiet VALUES (now())"); err != nil {
			return lagStats{}, err
		}
		c, err := lastCommit(ctx, conn)
		if err != nil {
			return lagStats{}, err
		}
		if _, _, err := clock.wait(ctx, c.seg, 3*benchArchiveTimeout+5*time.Minute); err != nil {
			return lagStats{}, err
		}
		commits = append(commits, c)
	}
	return lags(clock, commits)
}

// lags summarizes the lags of commits, whose segments were all archived.
func lags(clock *archiveClock, commits []commit) (lagStats, error) {
	st := lagStats{Commits: len(commits)}
	var ds []time.Duration
	segs := map[string]bool{}
	for _, c := range commits {
		at, exact, ok, err := clock.archived(c.seg)
		if err != nil || !ok {
			return lagStats{}, fmt.Errorf("segment %s: not seen archived (%v)", c.seg, err)
		}
		if !exact {
			st.Bounded++
		}
		segs[c.seg] = true
		ds = append(ds, at.Sub(c.at))
	}
	st.Segments = len(segs)
	st.P50, st.P99, st.Max = percentiles(ds)
	var pushes []time.Duration
	for seg := range segs {
		if d, ok := clock.push(seg); ok {
			pushes = append(pushes, d)
		}
	}
	if st.Pushes = len(pushes); st.Pushes > 0 {
		st.PushP50, st.PushP99, _ = percentiles(pushes)
	}
	return st, nil
}

// percentiles sorts ds and returns its p50, p99 (nearest rank) and
// largest.
func percentiles(ds []time.Duration) (p50, p99, largest time.Duration) {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	rank := func(p float64) time.Duration {
		return ds[max(0, min(int(float64(len(ds))*p+0.999999)-1, len(ds)-1))]
	}
	return rank(0.50), rank(0.99), ds[len(ds)-1]
}

// fillSQL inserts $1 rows of about 1 KiB each: hex text of random md5
// sums, which zstd halves, as it does much real data.
var fillSQL = "SELECT " + strings.Repeat("md5(random()::text) || ", 27) + "md5(random()::text) FROM generate_series(1, $1)"

// insertUntil creates table (pad text) and inserts rows in steps of a
// sixteenth of size until enough says so.
func insertUntil(t *testing.T, conn *pgx.Conn, table string, size int64, enough func() bool) {
	mustExec(t, conn, "CREATE TABLE "+table+" (pad text)")
	rows := max(1024, size/(16<<10))
	for !enough() {
		mustExec(t, conn, "INSERT INTO "+table+" "+fillSQL, rows)
	}
}

// archivedNow switches the primary's segment and waits until the agent
// reports it archived.
func archivedNow(t *testing.T, c *cluster, a *instance, conn *pgx.Conn) {
	seg := stringQuery(t, conn, "SELECT pg_walfile_name(pg_switch_wal())")
	c.waitStatus(a, 30*time.Minute, "segment "+seg+" archived", func(s agentapi.Status) bool {
		return s.Archive != nil && s.Archive.LastArchivedWAL >= seg
	})
}

// measureBaseBackup fills the agent's primary with size of data, then
// copies it with pg_basebackup -Fp and -Ft into local directories (the
// floor, through the server's socket as pgBackRest reads it) and with the
// agent's full backup into the store.
func (r *backupBench) measureBaseBackup(t *testing.T, c *cluster, a *instance, size int64) {
	ctx := context.Background()
	conn := sql(t, a)
	t.Logf("loading %s of data", formatBytes(size))
	insertUntil(t, conn, "bench_data", size, func() bool {
		return count(t, conn, "SELECT (pg_total_relation_size('bench_data') >= $1)::int", size) == 1
	})
	archivedNow(t, c, a, conn) // the load's WAL is in the store: the backups start alike
	mustExec(t, conn, "CHECKPOINT")
	r.DatabaseBytes = int64(count(t, conn, "SELECT sum(pg_database_size(oid))::bigint FROM pg_database"))

	for _, run := range []struct {
		format string
		into   *timing
	}{{"p", &r.BasePlain}, {"t", &r.BaseTar}} {
		dir := filepath.Join(c.dir, "pg_basebackup-F"+run.format)
		c.mkdir(dir, 0o700)
		t.Logf("pg_basebackup -F%s", run.format)
		run.into.Took = c.runAsServerUser(t, filepath.Join(c.pgBin, "pg_basebackup"), "-D", dir, "-F"+run.format,
			"-X", "stream", "-c", "fast", "-h", filepath.Join(a.dir, "run"), "-p", strconv.Itoa(a.port), "-U", "postgres", "-w")
		run.into.Bytes = dirBytes(t, dir)
		require.NoError(t, os.RemoveAll(dir))
	}

	t.Log("the agent's full backup")
	start := time.Now()
	_, err := c.client.Backup(ctx, a.url, agentapi.BackupRequest{ID: "bench-full", Type: "full"})
	require.NoError(t, err)
	s := c.waitStatus(a, 2*time.Hour, "the base backup finished", func(s agentapi.Status) bool {
		return s.Archive != nil && s.Archive.Run != nil && s.Archive.Run.ID == "bench-full" && s.Archive.Run.Finished != nil
	})
	r.BaseAgent.Took = time.Since(start)
	require.Empty(t, s.Archive.Run.Error, "the agent's base backup failed")
	s = c.waitStatus(a, 5*time.Minute, "pgbackrest info listing the backup", func(s agentapi.Status) bool {
		return s.Archive != nil && len(s.Archive.Backups) > 0
	})
	last := s.Archive.Backups[len(s.Archive.Backups)-1]
	r.DataBytes, r.RepoBytes = last.Size, last.RepositorySize
	r.BackupInfoTook = last.Finished.Sub(last.Started.Time)
}

// runAsServerUser runs a program as the servers' user (the agents'), in
// the foreground, and says how long it took.
func (c *cluster) runAsServerUser(t *testing.T, name string, args ...string) time.Duration {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "PATH="+c.pgBin+":"+os.Getenv("PATH"), "HOME="+c.dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	require.NoError(t, err, "%s: %s", cmd, out)
	return took
}

// dirBytes is the size of the files under dir.
func dirBytes(t *testing.T, dir string) int64 {
	var n int64
	require.NoError(t, filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	}))
	return n
}

// measureRestore writes size of WAL after the base backup, then restores
// the store's newest backup and replays the archive to its end, four
// times in the order by hand, agent, agent, by hand (so that neither
// comes first or last only): by hand, pgbackrest restore with db-0's
// configuration, then the server started on it until it has promoted; by
// the agent, the restore bootstrap of a new instance, as a Database's
// spec.bootstrap.recovery without a target runs it.
func (r *backupBench) measureRestore(t *testing.T, c *cluster, f *archiveFixture, a *instance, size int64) {
	conn := sql(t, a)
	from := stringQuery(t, conn, "SELECT pg_current_wal_insert_lsn()::text")
	walAfter := func() int64 {
		return int64(count(t, conn, "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint", from))
	}
	t.Logf("writing %s of WAL after the base backup", formatBytes(size))
	insertUntil(t, conn, "bench_after", size, func() bool { return walAfter() >= size })
	r.WALBytes = walAfter()
	r.RowsAfter = count(t, conn, "SELECT count(*) FROM bench_after")
	archivedNow(t, c, a, conn)

	for i, byHand := range []bool{true, false, false, true} {
		if byHand {
			t.Logf("restore %d: by hand", i+1)
			r.RestoresByHand = append(r.RestoresByHand, r.restoreByHand(t, c, a, i+1))
		} else {
			t.Logf("restore %d: the agent's", i+1)
			r.RestoresAgent = append(r.RestoresAgent, r.restoreByAgent(t, c, f, i+1))
		}
	}
}

// restoreByHand runs pgbackrest restore with db-0's own configuration
// into a new directory and starts the server on it until it has
// promoted; the server is stopped after.
func (r *backupBench) restoreByHand(t *testing.T, c *cluster, a *instance, n int) timing {
	confs, err := filepath.Glob(filepath.Join(a.dir, "tmp", "dbkeeper-pgbackrest-*", "pgbackrest.conf"))
	require.NoError(t, err)
	require.Len(t, confs, 1, "db-0's pgBackRest configuration")
	hand := &instance{name: "by-hand", dir: filepath.Join(c.dir, fmt.Sprintf("by-hand-%d", n))}
	hand.pgdata = filepath.Join(hand.dir, "data")
	c.mkdir(hand.dir, 0o755)
	c.mkdir(hand.pgdata, 0o700)
	run := timing{Start: time.Now()}
	// the agent's io-timeout for restores (longIOTimeout); pgBackRest
	// writes its own restore_command, with this configuration.
	c.runAsServerUser(t, "pgbackrest", "--config="+confs[0], "--stanza="+agentapi.Stanza, "--pg1-path="+hand.pgdata,
		"--io-timeout=60", "--type=default", "restore")
	run.Copy = time.Since(run.Start)
	r.RestoreCommand = strings.ReplaceAll(restoreCommandOf(t, hand.pgdata), c.dir, "$DIR")
	stop := c.startRestored(t, hand)
	run.Took = time.Since(run.Start)
	run.Server = readRecoveryLog(t, hand.logPath)
	restored := sql(t, hand)
	require.Equal(t, "false", stringQuery(t, restored, "SELECT pg_is_in_recovery()::text"), "the server by hand has not promoted")
	require.Equal(t, r.RowsAfter, count(t, restored, "SELECT count(*) FROM bench_after"), "rows the restore by hand replayed")
	restored.Close(context.Background())
	stop()
	require.NoError(t, os.RemoveAll(hand.dir))
	return run
}

// restoreByAgent bootstraps a new agent (db-<n>, with a repository of its
// own) by a restore from db-0's and waits until it reports a running
// primary; the agent is stopped after.
func (r *backupBench) restoreByAgent(t *testing.T, c *cluster, f *archiveFixture, n int) timing {
	ctx := context.Background()
	target := f.repository(fmt.Sprintf("%s-%d", benchTargetPath, n))
	target.ArchiveTimeout = benchArchiveTimeout
	b := c.start(fmt.Sprintf("db-%d", n), repositoryEnv(t, target))
	src := f.repository(benchSourcePath)
	src.CredentialsDir, src.CADir = "", ""
	src.Secrets = &agentapi.RepositorySecrets{AccessKeyID: f.store.AccessKey, SecretAccessKey: f.store.SecretKey, CA: string(f.store.CA)}
	run := timing{Start: time.Now()}
	_, err := c.client.Bootstrap(ctx, b.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapRestore, Recovery: &agentapi.RecoverySource{Repository: src}})
	require.NoError(t, err)
	c.waitStatus(b, 2*time.Hour, "restored, replayed and promoted", func(s agentapi.Status) bool {
		if run.Copy == 0 && s.State != agentapi.StateBootstrapping {
			run.Copy = time.Since(run.Start)
		}
		return runningAs(agentapi.RolePrimary)(s)
	})
	run.Took = time.Since(run.Start)
	run.Server = readRecoveryLog(t, b.logPath)
	restored := sql(t, b)
	require.Equal(t, r.RowsAfter, count(t, restored, "SELECT count(*) FROM bench_after"), "rows the agent's restore replayed")
	restored.Close(ctx)
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	<-b.exited
	require.NoError(t, os.RemoveAll(b.dir))
	return run
}

// restoreCommandOf is the restore_command pgbackrest restore wrote into
// pgdata's postgresql.auto.conf.
func restoreCommandOf(t *testing.T, pgdata string) string {
	auto, err := os.ReadFile(filepath.Join(pgdata, "postgresql.auto.conf"))
	require.NoError(t, err)
	for _, line := range strings.Split(string(auto), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && strings.TrimSpace(k) == "restore_command" {
			return strings.Trim(strings.TrimSpace(v), "'")
		}
	}
	t.Fatal("pgbackrest restore wrote no restore_command")
	return ""
}

// recoveryLog is when a recovering server logged the start and the end of
// its redo, and that it accepts connections (promoted).
type recoveryLog struct {
	RedoStart, RedoDone, Ready time.Time
}

// readRecoveryLog finds the phases of the recovery in a server's log
// (log_line_prefix '%m [%p] ', the default), the last of each.
func readRecoveryLog(t *testing.T, path string) recoveryLog {
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var l recoveryLog
	// the agent's log holds the server's records as JSON lines
	for _, line := range strings.Split(serverLogText(string(data)), "\n") {
		var at *time.Time
		switch {
		case strings.Contains(line, "LOG:  redo starts at "):
			at = &l.RedoStart
		case strings.Contains(line, "LOG:  redo done at "):
			at = &l.RedoDone
		case strings.Contains(line, "LOG:  database system is ready to accept connections"):
			at = &l.Ready
		default:
			continue
		}
		const stamp = "2006-01-02 15:04:05.000 MST"
		if len(line) < len(stamp) {
			continue
		}
		if ts, err := time.Parse(stamp, line[:len(stamp)]); err == nil {
			*at = ts
		}
	}
	require.False(t, l.RedoStart.IsZero() || l.RedoDone.IsZero() || l.Ready.IsZero(), "the recovery's phases in %s: %+v", path, l)
	return l
}

// startRestored starts the server on in's restored data directory with
// the settings the agent gives a recovering one (no connection before
// the promotion) and returns once it is ready, as `pg_ctl start -w` would:
// postmaster.pid says "ready" only after the end of recovery. The server
// is started directly, not by pg_ctl, so that it dies with this process;
// the returned func stops it (and so does the test's cleanup).
func (c *cluster) startRestored(t *testing.T, in *instance) (stop func()) {
	var err error
	in.port, err = framework.FreePort()
	require.NoError(t, err)
	in.logPath = filepath.Join(in.dir, "server.log")
	logFile, err := os.Create(in.logPath)
	require.NoError(t, err)
	defer logFile.Close()
	in.cmd = exec.Command(filepath.Join(c.pgBin, "postgres"), "-D", in.pgdata, "-c", "port="+strconv.Itoa(in.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+in.dir, "-c", "hot_standby=off",
		"-c", "fsync=off", "-c", "wal_log_hints=on", "-c", "track_commit_timestamp=on")
	in.cmd.Stdout, in.cmd.Stderr = logFile, logFile
	in.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGKILL}
	require.NoError(t, in.cmd.Start())
	in.exited = make(chan struct{})
	go func() { _ = in.cmd.Wait(); close(in.exited) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = in.cmd.Process.Signal(syscall.SIGINT) // fast shutdown
			select {
			case <-in.exited:
			case <-time.After(30 * time.Second):
				_ = in.cmd.Process.Kill()
				<-in.exited
			}
		})
	}
	t.Cleanup(stop)
	for !postmasterReady(in.pgdata) {
		select {
		case <-in.exited:
			log, _ := os.ReadFile(in.logPath)
			t.Fatalf("the restored server exited: %s", log)
		case <-time.After(100 * time.Millisecond): // pg_ctl -w's poll
		}
	}
	return stop
}

// postmasterReady says whether postmaster.pid's status line says ready.
func postmasterReady(pgdata string) bool {
	b, err := os.ReadFile(filepath.Join(pgdata, "postmaster.pid"))
	if err != nil {
		return false
	}
	lines := strings.Split(string(b), "\n")
	return len(lines) > 7 && strings.TrimSpace(lines[7]) == "ready"
}
