package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/agent"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// metricsScraper gathers the agent's PostgreSQL metrics of one instance
// as a scrape would, through a pedantic registry (which also fails on a
// series its collector did not describe).
type metricsScraper struct {
	t   *testing.T
	reg *prometheus.Registry
}

// newMetricsScraper is a scraper of in's server, read as its agent reads
// it: over the socket as the superuser.
func newMetricsScraper(t *testing.T, in *instance) *metricsScraper {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(agent.NewMetricsCollector(agent.Config{
		PGData: in.pgdata, SocketDir: filepath.Join(in.dir, "run"), Port: in.port, User: "postgres"}, testr.New(t)))
	return &metricsScraper{t: t, reg: reg}
}

// scraped are the metric families of one scrape, by name less
// dbkeeper_postgres_.
type scraped struct {
	t        *testing.T
	families map[string]*dto.MetricFamily
	took     time.Duration
}

// scrape gathers the metrics; an error of Gather fails the test.
func (m *metricsScraper) scrape() scraped {
	m.t.Helper()
	start := time.Now()
	families, err := m.reg.Gather()
	took := time.Since(start)
	require.NoError(m.t, err, "a scrape must never fail")
	s := scraped{t: m.t, families: map[string]*dto.MetricFamily{}, took: took}
	for _, f := range families {
		s.families[strings.TrimPrefix(f.GetName(), "dbkeeper_postgres_")] = f
	}
	return s
}

// find is the value of the series of family name that has labels (name,
// value pairs), if the scrape has one.
func (s scraped) find(name string, labels ...string) (float64, bool) {
	f := s.families[name]
	if f == nil {
		return 0, false
	}
series:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
			}
			if !found {
				continue series
			}
		}
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue(), true
		}
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}

// value is find's value; a series missing fails the test.
func (s scraped) value(name string, labels ...string) float64 {
	s.t.Helper()
	v, ok := s.find(name, labels...)
	require.True(s.t, ok, "no series %s%v in the scrape: %v", name, labels, s.names())
	return v
}

// names are the scrape's families.
func (s scraped) names() []string {
	var out []string
	for n := range s.families {
		out = append(out, n)
	}
	return out
}

// text is the scrape in Prometheus's text format.
func (s scraped) text() string {
	s.t.Helper()
	var out strings.Builder
	names := s.names()
	sort.Strings(names)
	for _, n := range names {
		_, err := expfmt.MetricFamilyToText(&out, s.families[n])
		require.NoError(s.t, err)
	}
	return out.String()
}

// connectTo connects to database db of in's server over its unix socket
// as the superuser (sql's connection is to postgres).
func connectTo(t *testing.T, in *instance, db string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=postgres dbname=%s", filepath.Join(in.dir, "run"), in.port, db))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// archivingPair starts db-0, a primary archiving into a directory by a
// command that fails while the file archiveFails exists, and db-1, its
// standby streaming through the cluster's proxy from a slot of its own;
// serverArgs are more settings of both servers. pa is a connection to
// db-0, which has a table t (id bigint).
func archivingPair(t *testing.T, c *cluster, serverArgs ...string) (a, b *instance, pa *pgx.Conn, archiveFails string) {
	t.Helper()
	ctx := context.Background()
	archiveDir := filepath.Join(c.dir, "archive")
	c.mkdir(archiveDir, 0o755)
	archiveFails = filepath.Join(c.dir, "archive-fails")
	c.serverArgs = append([]string{"-c", "archive_mode=on",
		"-c", fmt.Sprintf("archive_command=test ! -e %s && cp %%p %s/%%f", archiveFails, archiveDir)}, serverArgs...)
	a = c.start("db-0")
	b = c.start("db-1")
	_, err := c.client.Bootstrap(ctx, a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	c.waitStatus(a, 90*time.Second, "a running primary", runningAs(agentapi.RolePrimary))
	pa = sql(t, a)
	mustExec(t, pa, fmt.Sprintf("CREATE ROLE %s WITH LOGIN REPLICATION PASSWORD '%s'", agentapi.ReplicationUser, strings.ReplaceAll(replPassword, "'", "''")))
	mustExec(t, pa, "SELECT pg_create_physical_replication_slot($1)", agentapi.SlotName(b.name))
	mustExec(t, pa, "CREATE TABLE t (id bigint)")
	c.proxy.target.Store(int32(a.port))
	_, err = c.client.Bootstrap(ctx, b.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapClone})
	require.NoError(t, err)
	c.waitStatus(b, 90*time.Second, "a streaming standby", func(s agentapi.Status) bool {
		return runningAs(agentapi.RoleReplica)(s) && s.WALReceiver == "streaming"
	})
	return a, b, pa, archiveFails
}

// TestMetricsOfAPrimaryAndItsStandby reads the agent's PostgreSQL metrics
// of a primary and its streaming standby (archiving to a directory by a
// command that fails while a file exists) and checks them against what
// the servers do: up and the roles, max_connections as SHOW says it, a
// transaction held idle and its age growing, a lock made to wait, the
// primary's series for the standby and its lag while the standby's
// replay is paused, commits and rollbacks of another database, sizes,
// transaction-ID ages, a requested checkpoint, WAL positions, archived
// and failed segments, the volume's bytes; a server that hangs and a
// stopped one are scraped as up 0 with no error.
func TestMetricsOfAPrimaryAndItsStandby(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped under -short")
	}
	c := newCluster(t)
	ctx := context.Background()
	a, b, pa, archiveFails := archivingPair(t, c)
	mustExec(t, pa, "CREATE DATABASE app")
	pb := sql(t, b)
	ma, mb := newMetricsScraper(t, a), newMetricsScraper(t, b)

	// Up, the roles, max_connections, the volume: on each.
	for _, in := range []struct {
		inst      *instance
		m         *metricsScraper
		role      string
		otherRole string
	}{{a, ma, "primary", "replica"}, {b, mb, "replica", "primary"}} {
		s := in.m.scrape()
		t.Logf("MEASURED %s: one scrape %s, %d families", in.inst.name, s.took.Round(time.Millisecond), len(s.families))
		assert.Equal(t, 1.0, s.value("up"), in.inst.name)
		assert.Equal(t, 1.0, s.value("role", "role", in.role), in.inst.name)
		_, other := s.find("role", "role", in.otherRole)
		assert.False(t, other, "%s: a %s series", in.inst.name, in.otherRole)
		assert.Zero(t, s.value("scrape_errors"), "%s: a query failed", in.inst.name)
		assert.Equal(t, show(t, in.inst, "max_connections"), strconv.FormatFloat(s.value("max_connections"), 'f', -1, 64), in.inst.name)
		assert.Positive(t, s.value("volume_free_bytes"), in.inst.name)
		assert.Positive(t, s.value("volume_used_bytes"), in.inst.name)
		assert.Positive(t, s.value("wal_position_bytes"), in.inst.name)
		// the checkpointer starts with the server, just after the postmaster
		started := float64(count(t, sql(t, in.inst), "SELECT extract(epoch FROM pg_postmaster_start_time())::bigint"))
		assert.InDelta(t, started, s.value("start_time_seconds"), 5, "%s: the start time", in.inst.name)
		assert.GreaterOrEqual(t, s.value("checkpoints_total", "kind", "timed"), 0.0, in.inst.name)
		for _, state := range []string{"active", "idle", "idle in transaction"} {
			_, ok := s.find("connections", "state", state)
			assert.True(t, ok, "%s: no series of the connections %s", in.inst.name, state)
		}
		_, ok := s.find("database_size_bytes", "datname", "template1")
		assert.False(t, ok, "%s: a template's series", in.inst.name)
	}
	s := ma.scrape()
	assert.NotContains(t, s.names(), "standby_replay_lag_bytes", "the primary reports a standby's metrics")
	assert.LessOrEqual(t, s.value("wal_position_bytes"), float64(lsn(t, stringQuery(t, pa, "SELECT pg_current_wal_lsn()::text"))))
	s = mb.scrape()
	assert.NotContains(t, s.names(), "replication_lag_bytes", "the standby has no standby of its own")
	assert.Equal(t, 1.0, s.value("standby_streaming"))

	// The primary's series for the standby, by its application_name; once
	// the standby caught up, no lag.
	// The three positions are read in one scrape: PostgreSQL writes WAL of
	// its own (a running-transactions record every 15 s), so a second
	// scrape may find the standby a record behind again.
	waitFor(t, func() bool {
		s = ma.scrape()
		for _, p := range []string{"sent", "flush", "replay"} {
			if v, ok := s.find("replication_lag_bytes", "application_name", b.name, "position", p); !ok || v != 0 {
				return false
			}
		}
		return true
	}, 30*time.Second, "the primary reports the standby's sent, flush and replay positions, caught up")
	assert.GreaterOrEqual(t, s.value("replication_replay_lag_seconds", "application_name", b.name), 0.0)
	assert.Len(t, s.families["replication_replay_lag_seconds"].GetMetric(), 1, "one standby")
	waitFor(t, func() bool {
		return mb.scrape().value("wal_position_bytes") == ma.scrape().value("wal_position_bytes")
	}, 20*time.Second, "the standby's WAL position is the primary's")

	// Commits and rollbacks of the application's database (the collector
	// itself connects to postgres), its size; transaction-ID ages.
	app := connectTo(t, a, "app")
	mustExec(t, app, "CREATE TABLE items (id bigint)")
	s = ma.scrape()
	commits, rollbacks := s.value("xact_commits_total", "datname", "app"), s.value("xact_rollbacks_total", "datname", "app")
	for i := range 10 {
		mustExec(t, app, "INSERT INTO items VALUES ($1)", i)
	}
	tx, err := app.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "INSERT INTO items VALUES (-1)")
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	// A backend flushes its statistics at most once a second, the rest
	// when it has been idle for 10 s: this one flushes when it goes idle.
	mustExec(t, app, "SELECT pg_stat_force_next_flush()")
	waitFor(t, func() bool {
		s := ma.scrape()
		return s.value("xact_commits_total", "datname", "app") >= commits+10 && s.value("xact_rollbacks_total", "datname", "app") >= rollbacks+1
	}, 20*time.Second, "ten more commits and one more rollback in app")
	s = ma.scrape()
	t.Logf("app: commits %v -> %v, rollbacks %v -> %v", commits, s.value("xact_commits_total", "datname", "app"),
		rollbacks, s.value("xact_rollbacks_total", "datname", "app"))
	assert.Positive(t, s.value("database_size_bytes", "datname", "app"))
	assert.Positive(t, s.value("database_size_bytes", "datname", "postgres"))
	xidAge := s.value("database_xid_age", "datname", "postgres")
	assert.Positive(t, xidAge)
	assert.LessOrEqual(t, xidAge, float64(count(t, pa, "SELECT age(datfrozenxid) FROM pg_database WHERE datname = 'postgres'")))

	// A transaction held open: idle in transaction, and the oldest
	// transaction's age grows; a query made to wait for its lock is one
	// waiting lock.
	holder := sql(t, a)
	held, err := holder.Begin(ctx)
	require.NoError(t, err)
	_, err = held.Exec(ctx, "LOCK TABLE t IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	s = ma.scrape()
	assert.GreaterOrEqual(t, s.value("connections", "state", "idle in transaction"), 1.0)
	first := s.value("oldest_transaction_age_seconds")
	assert.Positive(t, first)
	time.Sleep(1500 * time.Millisecond)
	later := ma.scrape().value("oldest_transaction_age_seconds")
	assert.GreaterOrEqual(t, later-first, 1.4, "the oldest transaction's age grows: %v then %v", first, later)
	waiter := sql(t, a)
	waited := make(chan error, 1)
	go func() {
		_, err := waiter.Exec(ctx, "SELECT count(*) FROM t")
		waited <- err
	}()
	waitFor(t, func() bool { return ma.scrape().value("locks_waiting") == 1 }, 10*time.Second, "one waiting lock")
	assert.GreaterOrEqual(t, ma.scrape().value("connections", "state", "active"), 1.0, "the waiting query is active")
	require.NoError(t, held.Commit(ctx))
	require.NoError(t, <-waited)
	waitFor(t, func() bool {
		s := ma.scrape()
		return s.value("locks_waiting") == 0 && s.value("oldest_transaction_age_seconds") == 0
	}, 10*time.Second, "no waiting lock and no open transaction")

	// A requested checkpoint.
	requested := ma.scrape().value("checkpoints_total", "kind", "requested")
	mustExec(t, pa, "CHECKPOINT")
	waitFor(t, func() bool { return ma.scrape().value("checkpoints_total", "kind", "requested") > requested }, 10*time.Second,
		"one more requested checkpoint")

	// Archiving: a switched segment archived, then a failing attempt.
	s = ma.scrape()
	assert.Zero(t, s.value("archive_failed_total"))
	archived := s.value("archive_archived_total")
	mustExec(t, pa, "INSERT INTO t VALUES (1)")
	mustExec(t, pa, "SELECT pg_switch_wal()")
	waitFor(t, func() bool { return ma.scrape().value("archive_archived_total") > archived }, 20*time.Second, "a segment archived")
	age := ma.scrape().value("archive_last_archived_age_seconds")
	assert.True(t, age >= 0 && age < 20, "the last archived segment's age: %v", age)
	require.NoError(t, os.WriteFile(archiveFails, nil, 0o644))
	mustExec(t, pa, "INSERT INTO t VALUES (2)")
	mustExec(t, pa, "SELECT pg_switch_wal()")
	waitFor(t, func() bool { return ma.scrape().value("archive_failed_total") > 0 }, 20*time.Second, "a failed archive attempt")
	require.NoError(t, os.Remove(archiveFails))

	// The standby's replay paused: WAL received and not replayed, the
	// time since the last replayed commit growing, the primary's replay
	// lag; resumed, caught up again.
	mustExec(t, pb, "SELECT pg_wal_replay_pause()")
	mustExec(t, pa, "INSERT INTO t VALUES (3)")
	waitFor(t, func() bool { return mb.scrape().value("standby_replay_lag_bytes") > 0 }, 20*time.Second,
		"WAL received and not replayed on the paused standby")
	s = mb.scrape()
	behind := s.value("standby_replay_lag_seconds")
	assert.Positive(t, behind)
	assert.Equal(t, 1.0, s.value("standby_streaming"), "a paused replay still streams")
	time.Sleep(1200 * time.Millisecond)
	assert.GreaterOrEqual(t, mb.scrape().value("standby_replay_lag_seconds")-behind, 1.1, "the replay lag grows while paused")
	waitFor(t, func() bool {
		return ma.scrape().value("replication_lag_bytes", "application_name", b.name, "position", "replay") > 0
	}, 20*time.Second, "the primary sees the standby's replay behind")
	t.Logf("the primary's scrape while its standby's replay is paused:\n%s", ma.scrape().text())
	t.Logf("the standby's:\n%s", mb.scrape().text())
	mustExec(t, pb, "SELECT pg_wal_replay_resume()")
	waitFor(t, func() bool {
		s := mb.scrape()
		return s.value("standby_replay_lag_bytes") == 0 && s.value("standby_replay_lag_seconds") == 0
	}, 20*time.Second, "the standby caught up")
	waitFor(t, func() bool {
		return ma.scrape().value("replication_lag_bytes", "application_name", b.name, "position", "replay") == 0
	}, 30*time.Second, "the primary sees the standby caught up")

	// A server that does not answer (its postmaster stopped): up 0 within
	// the scrape's timeout, no error.
	pid := postmasterPID(b.pgdata)
	require.Positive(t, pid)
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	s = mb.scrape()
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	t.Logf("MEASURED a scrape of a stopped postmaster: %s", s.took.Round(time.Millisecond))
	assert.Zero(t, s.value("up"))
	assert.Less(t, s.took, 5*time.Second, "the scrape's timeout")
	assert.ElementsMatch(t, []string{"up", "volume_used_bytes", "volume_free_bytes"}, s.names())

	// The standby's agent and server stopped: up 0 and the volume, no
	// error; the primary no longer reports it.
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-b.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("the standby's agent did not exit within 60s of SIGTERM")
	}
	s = mb.scrape()
	assert.Zero(t, s.value("up"))
	assert.Positive(t, s.value("volume_free_bytes"))
	assert.ElementsMatch(t, []string{"up", "volume_used_bytes", "volume_free_bytes"}, s.names())
	waitFor(t, func() bool {
		_, ok := ma.scrape().find("replication_lag_bytes", "application_name", b.name)
		return !ok
	}, 20*time.Second, "the stopped standby's series gone from the primary's")
	assert.Equal(t, 1.0, ma.scrape().value("up"))
}

// TestTopStatements reads the top statements of pg_stat_statements through
// the agent's /metrics, as the manager asks for them
// (spec.monitoring.topStatements): a statement the application ran 25
// times is there with its calls, database, user and normalised text; the
// agent's own scrapes are not (their sessions are untracked); at most the
// number asked for; none unless asked; a database without the extension
// is a failed query of the scrape, not a failed scrape; a number out of
// range is refused, naming the parameter.
func TestTopStatements(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped under -short")
	}
	c := newCluster(t)
	ctx := context.Background()
	c.serverArgs = []string{"-c", "shared_preload_libraries=pg_stat_statements"}
	a := c.start("db-0")
	_, err := c.client.Bootstrap(ctx, a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	c.waitStatus(a, 90*time.Second, "a running primary", runningAs(agentapi.RolePrimary))
	mustExec(t, sql(t, a), "CREATE DATABASE app")
	app := connectTo(t, a, "app")
	mustExec(t, app, "CREATE EXTENSION pg_stat_statements")
	mustExec(t, app, "CREATE TABLE items (id bigint)")
	// 25 calls of 20 ms: more execution time than the set-up's statements
	for i := range 25 {
		mustExec(t, app, "SELECT count(*), pg_sleep(0.02)   FROM items\n\tWHERE id > $1", i)
	}
	// a few scrapes first: their own statements would be there by now
	for range 3 {
		_, err := c.client.Metrics(ctx, a.url, agentapi.MetricsOptions{TopStatements: 5, StatementsDatabase: "app"})
		require.NoError(t, err)
	}

	start := time.Now()
	families, err := c.client.Metrics(ctx, a.url, agentapi.MetricsOptions{TopStatements: 5, StatementsDatabase: "app"})
	require.NoError(t, err)
	t.Logf("MEASURED a scrape with the top 5 statements: %s", time.Since(start).Round(time.Millisecond))
	calls := families["dbkeeper_postgres_statement_calls_total"]
	require.NotNil(t, calls, "no top statements in the scrape")
	assert.LessOrEqual(t, len(calls.GetMetric()), 5)
	for _, name := range []string{"dbkeeper_postgres_statement_exec_seconds_total", "dbkeeper_postgres_statement_rows_total"} {
		require.NotNil(t, families[name], name)
		assert.Len(t, families[name].GetMetric(), len(calls.GetMetric()), name)
	}
	assert.Zero(t, families["dbkeeper_postgres_scrape_errors"].GetMetric()[0].GetGauge().GetValue())
	found := false
	for _, m := range calls.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		t.Logf("top statement: %v calls %v", labels, m.GetCounter().GetValue())
		for _, own := range []string{"pg_stat_activity", "pg_stat_archiver", "pg_control_system"} {
			assert.NotContains(t, labels["query"], own, "the agent's own statements are not tracked")
		}
		assert.LessOrEqual(t, len([]rune(labels["query"])), 120)
		if labels["query"] == "SELECT count(*), pg_sleep($2) FROM items WHERE id > $1" {
			found = true
			assert.Equal(t, 25.0, m.GetCounter().GetValue())
			assert.Equal(t, "app", labels["datname"])
			assert.Equal(t, "postgres", labels["user"])
			assert.NotEmpty(t, labels["queryid"])
		}
	}
	assert.True(t, found, "the application's statement among the top statements")

	families, err = c.client.Metrics(ctx, a.url, agentapi.MetricsOptions{})
	require.NoError(t, err)
	assert.NotContains(t, families, "dbkeeper_postgres_statement_calls_total", "top statements when none were asked for")

	families, err = c.client.Metrics(ctx, a.url, agentapi.MetricsOptions{TopStatements: 5, StatementsDatabase: "postgres"})
	require.NoError(t, err, "a database without the extension fails the scrape")
	assert.Equal(t, 1.0, families["dbkeeper_postgres_scrape_errors"].GetMetric()[0].GetGauge().GetValue())
	assert.Equal(t, 1.0, families["dbkeeper_postgres_up"].GetMetric()[0].GetGauge().GetValue())
	assert.NotContains(t, families, "dbkeeper_postgres_statement_calls_total")

	_, err = c.client.Metrics(ctx, a.url, agentapi.MetricsOptions{TopStatements: agentapi.MaxTopStatements + 1, StatementsDatabase: "app"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), agentapi.MetricsTopStatementsParam)
}

// TestCustomQueries runs user-defined metric queries (a file in
// postgres_exporter's format, as the ConfigMap of
// spec.monitoring.customQueries is mounted) through the agent's /metrics,
// as the manager asks for them: as the application's role, so a query of a
// table it may read is reported with its labels, one of a table only the
// superuser may read fails, and so does one that writes (read-only), each
// counted in scrape_errors while the others are still reported and nothing
// was written; a query may name another database; the file is read again
// at each scrape (a query added is there at the next, no restart); a file
// that does not parse is one error, not a failed scrape; nothing is run
// unless the scrape names the role.
func TestCustomQueries(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped under -short")
	}
	c := newCluster(t)
	ctx := context.Background()
	file := filepath.Join(c.dir, "queries.yaml")
	c.agentArgs = map[string][]string{"db-0": {"--custom-queries=" + file}}
	a := c.start("db-0")
	_, err := c.client.Bootstrap(ctx, a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	c.waitStatus(a, 90*time.Second, "a running primary", runningAs(agentapi.RolePrimary))
	pa := sql(t, a)
	mustExec(t, pa, "CREATE ROLE shop LOGIN")
	mustExec(t, pa, "CREATE DATABASE app OWNER shop")
	super := connectTo(t, a, "app")
	mustExec(t, super, "CREATE TABLE only_superuser (x int)")
	mustExec(t, super, "SET ROLE shop")
	mustExec(t, super, "CREATE TABLE jobs (queue text, done bool)")
	mustExec(t, super, "INSERT INTO jobs VALUES ('mail', false), ('mail', false), ('mail', true), ('sms', false)")
	mustExec(t, super, "RESET ROLE")
	queries := `
pending_jobs:
  query: SELECT queue, count(*) FILTER (WHERE NOT done) AS pending, count(*) AS total FROM jobs GROUP BY queue
  metrics:
    - queue:
        usage: LABEL
        description: The queue.
    - pending:
        usage: GAUGE
        description: Jobs not done.
    - total:
        usage: COUNTER
        description: Jobs ever queued.
forbidden:
  query: SELECT count(*) AS n FROM only_superuser
  metrics:
    - n: {usage: GAUGE}
writer:
  query: WITH x AS (INSERT INTO jobs VALUES ('sms', false) RETURNING 1) SELECT count(*) AS n FROM x
  metrics:
    - n: {usage: GAUGE}
elsewhere:
  database: postgres
  query: SELECT current_user = 'shop' AS as_shop, current_database() = 'postgres' AS here
  metrics:
    - as_shop: {usage: GAUGE}
    - here: {usage: GAUGE}
`
	require.NoError(t, os.WriteFile(file, []byte(queries), 0o644))
	asked := agentapi.MetricsOptions{QueriesUser: "shop", QueriesDatabase: "app"}
	scrape := func(o agentapi.MetricsOptions) map[string]*dto.MetricFamily {
		families, err := c.client.Metrics(ctx, a.url, o)
		require.NoError(t, err, "a scrape with user-defined queries must not fail")
		return families
	}
	value := func(families map[string]*dto.MetricFamily, name string, labels ...string) float64 {
		t.Helper()
		s := scraped{t: t, families: families}
		return s.value(name, labels...)
	}
	start := time.Now()
	families := scrape(asked)
	t.Logf("MEASURED a scrape with four user-defined queries: %s", time.Since(start).Round(time.Millisecond))
	assert.Equal(t, 2.0, value(families, "dbkeeper_postgres_custom_pending_jobs_pending", "queue", "mail"))
	assert.Equal(t, 1.0, value(families, "dbkeeper_postgres_custom_pending_jobs_pending", "queue", "sms"))
	assert.Equal(t, 3.0, value(families, "dbkeeper_postgres_custom_pending_jobs_total", "queue", "mail"))
	assert.Equal(t, dto.MetricType_COUNTER, families["dbkeeper_postgres_custom_pending_jobs_total"].GetType())
	assert.Equal(t, "Jobs not done.", families["dbkeeper_postgres_custom_pending_jobs_pending"].GetHelp())
	assert.Equal(t, 1.0, value(families, "dbkeeper_postgres_custom_elsewhere_as_shop"), "run as the application's role")
	assert.Equal(t, 1.0, value(families, "dbkeeper_postgres_custom_elsewhere_here"), "in the database the query names")
	assert.NotContains(t, families, "dbkeeper_postgres_custom_forbidden_n", "a table the role may not read")
	assert.NotContains(t, families, "dbkeeper_postgres_custom_writer_n", "a query that writes")
	assert.Equal(t, 2.0, value(families, "dbkeeper_postgres_scrape_errors"), "the two refused queries")
	assert.Equal(t, 1.0, value(families, "dbkeeper_postgres_up"))
	assert.Equal(t, 4, count(t, super, "SELECT count(*) FROM jobs"), "nothing written")

	for name := range scrape(agentapi.MetricsOptions{}) {
		assert.NotContains(t, name, "dbkeeper_postgres_custom_", "user-defined queries run when no role was named")
	}

	require.NoError(t, os.WriteFile(file, []byte(queries+`
queues:
  query: SELECT count(DISTINCT queue) AS n FROM jobs
  metrics:
    - n: {usage: GAUGE}
`), 0o644))
	assert.Equal(t, 2.0, value(scrape(asked), "dbkeeper_postgres_custom_queues_n"), "a query added to the file")

	require.NoError(t, os.WriteFile(file, []byte("queues: ["), 0o644))
	families = scrape(asked)
	assert.Equal(t, 1.0, value(families, "dbkeeper_postgres_scrape_errors"), "a file that does not parse")
	assert.Equal(t, 1.0, value(families, "dbkeeper_postgres_up"))
}
