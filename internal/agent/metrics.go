package agent

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// metricsTimeout bounds one scrape of the local server: its connection
// (connect's own connect_timeout is 3 s) and every query. A server that
// does not answer within it is reported down, never as a failed scrape.
const metricsTimeout = 4 * time.Second

// metricsDesc describes the metric dbkeeper_postgres_<name>.
func metricsDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("dbkeeper_postgres_"+name, help, labels, nil)
}

// The PostgreSQL metrics of one instance. The pod, namespace and Database
// are the scrape target's labels, not the collector's: the manager adds
// them (namespace, database, pod) when it serves the series again, so a
// PostgreSQL database is labelled datname, pg_database's own name for it.
var (
	upDesc = metricsDesc("up",
		"1 when the local PostgreSQL server answered this scrape, else 0 (then only the volume's metrics are reported).")
	roleDesc = metricsDesc("role",
		"1, labelled with the role the server runs as: primary or replica.", "role")
	scrapeErrorsDesc = metricsDesc("scrape_errors",
		"The number of metric queries that failed in this scrape, their series left out (the agent's log says why).")
	connectionsDesc = metricsDesc("connections",
		"Client backends by state (pg_stat_activity), in connections; the scrape's own is not counted.", "state")
	maxConnectionsDesc = metricsDesc("max_connections",
		"The server's max_connections setting, in connections.")
	commitsDesc = metricsDesc("xact_commits_total",
		"Transactions committed in the database since its statistics were reset (pg_stat_database), in transactions.", "datname")
	rollbacksDesc = metricsDesc("xact_rollbacks_total",
		"Transactions rolled back in the database since its statistics were reset (pg_stat_database), in transactions.", "datname")
	databaseSizeDesc = metricsDesc("database_size_bytes",
		"The database's size on disk (pg_database_size), in bytes.", "datname")
	xidAgeDesc = metricsDesc("database_xid_age",
		"The age of the database's oldest unfrozen transaction ID, age(datfrozenxid), in transactions; PostgreSQL refuses writes near 2^31 (wraparound).", "datname")
	oldestXactDesc = metricsDesc("oldest_transaction_age_seconds",
		"How long the oldest transaction a client backend holds open has been running, in seconds; 0 when none is open.")
	locksWaitingDesc = metricsDesc("locks_waiting",
		"Locks requested and not granted yet (pg_locks), in locks.")
	checkpointsDesc = metricsDesc("checkpoints_total",
		"Checkpoints and restartpoints (a replica's) since the statistics were reset, by kind: timed or requested, in checkpoints.", "kind")
	startTimeDesc = metricsDesc("start_time_seconds",
		"When the server last started, or restarted its processes after one of them crashed, in seconds since the epoch: each change is a restart.")
	walPositionDesc = metricsDesc("wal_position_bytes",
		"The WAL position in bytes from the start of WAL: pg_current_wal_lsn() on a primary (its rate is the WAL generated), the last position received on a replica.")
	replicationLagDesc = metricsDesc("replication_lag_bytes",
		"On a primary, how far a standby's sent, flushed or replayed position is behind the current WAL position (pg_stat_replication), in bytes.", "application_name", "position")
	replicationReplayLagDesc = metricsDesc("replication_replay_lag_seconds",
		"On a primary, the standby's last measured replay lag (pg_stat_replication.replay_lag), in seconds; 0 once it caught up with no WAL coming.", "application_name")
	standbyLagDesc = metricsDesc("standby_replay_lag_bytes",
		"On a replica, the WAL received and not replayed yet, in bytes.")
	standbyLagSecondsDesc = metricsDesc("standby_replay_lag_seconds",
		"On a replica whose replay is behind what it received, the time since the last replayed transaction committed on the primary, in seconds; 0 when caught up.")
	standbyStreamingDesc = metricsDesc("standby_streaming",
		"On a replica, 1 when its WAL receiver streams from the primary, else 0.")
	archivedDesc = metricsDesc("archive_archived_total",
		"WAL segments archived since the statistics were reset (pg_stat_archiver), in segments.")
	archiveFailedDesc = metricsDesc("archive_failed_total",
		"Failed attempts to archive a WAL segment since the statistics were reset (pg_stat_archiver), in attempts.")
	lastArchivedAgeDesc = metricsDesc("archive_last_archived_age_seconds",
		"How long ago the last WAL segment was archived, in seconds; absent when none was.")
	volumeUsedDesc = metricsDesc("volume_used_bytes",
		"The data volume's size less its free bytes (blocks reserved for root count as used: PostgreSQL cannot write them), in bytes.")
	statementCallsDesc = metricsDesc("statement_calls_total",
		"Calls of one of the statements of pg_stat_statements that took the most execution time (spec.monitoring.topStatements), since its statistics were reset, in calls.", statementLabels...)
	statementTimeDesc = metricsDesc("statement_exec_seconds_total",
		"Execution time of one of the top statements of pg_stat_statements since its statistics were reset, in seconds.", statementLabels...)
	statementRowsDesc = metricsDesc("statement_rows_total",
		"Rows retrieved or affected by one of the top statements of pg_stat_statements since its statistics were reset, in rows.", statementLabels...)
	volumeFreeDesc = metricsDesc("volume_free_bytes",
		"The bytes PostgreSQL may still write on the data volume, in bytes.")
)

// metricsDescs are every metric of the collector, for Describe.
var metricsDescs = []*prometheus.Desc{upDesc, roleDesc, scrapeErrorsDesc, connectionsDesc, maxConnectionsDesc,
	commitsDesc, rollbacksDesc, databaseSizeDesc, xidAgeDesc, oldestXactDesc, locksWaitingDesc, checkpointsDesc,
	startTimeDesc, walPositionDesc, replicationLagDesc, replicationReplayLagDesc, standbyLagDesc, standbyLagSecondsDesc,
	standbyStreamingDesc, archivedDesc, archiveFailedDesc, lastArchivedAgeDesc, volumeUsedDesc, volumeFreeDesc,
	statementCallsDesc, statementTimeDesc, statementRowsDesc}

// statementLabels label a top statement: pg_stat_statements' queryid (one
// per normalised statement, database and user), the database and user it
// ran in, and its normalised text's first statementTextMax characters.
var statementLabels = []string{"queryid", "datname", "user", "query"}

// connectionStates are pg_stat_activity's states, each reported (0 when
// no backend is in it) so that a dashboard or an alert sees the zeros.
var connectionStates = []string{"active", "idle", "idle in transaction", "idle in transaction (aborted)",
	"fastpath function call", "disabled"}

// metricsCollector is the prometheus.Collector of the local server's
// metrics: each scrape connects to the server as the agent runs SQL
// (connect), reads it within metricsTimeout and disconnects.
type metricsCollector struct {
	a *Agent
	// o is what the scrape asks for beyond the defaults.
	o agentapi.MetricsOptions
}

// metricsCollector returns the collector of a's server.
func (a *Agent) metricsCollector() *metricsCollector {
	return &metricsCollector{a: a}
}

// Describe sends every metric the collector may report.
func (m *metricsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range metricsDescs {
		ch <- d
	}
}

// Collect reports the volume's metrics and, when the server answers, up 1
// and the server's metrics; else up 0. A query that fails is logged,
// counted in scrape_errors and its series left out: no error reaches the
// registry, which would fail the whole scrape.
func (m *metricsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range m.volume() {
		ch <- s
	}
	ctx, cancel := context.WithTimeout(context.Background(), metricsTimeout)
	defer cancel()
	conn, err := m.a.connect(ctx)
	var srv metricsServer
	if err == nil {
		defer conn.Close(context.Background())
		srv, err = readMetricsServer(ctx, conn)
	}
	if err != nil {
		// a server that starts, stops or restarts: not worth an error
		m.a.log.V(1).Info("PostgreSQL metrics: the server does not answer", "error", err.Error())
		ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, 0)
		return
	}
	b := metricsBatch{}
	b.gauge(upDesc, 1)
	b.gauge(roleDesc, 1, string(srv.role()))
	b.gauge(maxConnectionsDesc, srv.maxConnections)
	b.gauge(walPositionDesc, srv.walPosition)
	b.gauge(startTimeDesc, srv.startTime)
	qs := metricsQueries(srv)
	if m.o.TopStatements > 0 {
		// on a connection of its own, to the database holding the extension
		qs = append(qs, metricsQuery{"top statements", func(ctx context.Context, _ *pgx.Conn, b *metricsBatch) error {
			return m.readTopStatements(ctx, b)
		}})
	}
	failed := 0
	for _, q := range qs {
		var qb metricsBatch
		err := q.read(ctx, conn, &qb)
		if err == nil {
			b.samples = append(b.samples, qb.samples...)
			err = qb.err
		}
		if err != nil {
			failed++
			m.a.log.Error(fmt.Errorf("reading the %s metrics: %w", q.what, err), "Cannot read a PostgreSQL metric")
		}
	}
	if m.o.QueriesUser != "" {
		failed += m.readCustomQueries(ctx, &b)
	}
	b.gauge(scrapeErrorsDesc, float64(failed))
	for _, s := range b.samples {
		ch <- s
	}
}

// volume is the data volume's used and free bytes, reported whether the
// server runs or not; none when the volume cannot be read.
func (m *metricsCollector) volume() []prometheus.Metric {
	dir := filepath.Dir(m.a.cfg.PGData)
	size, err := volumeSize(dir)
	var free uint64
	if err == nil {
		free, err = volumeAvailable(dir)
	}
	if err != nil {
		m.a.log.Error(err, "Cannot read the data volume for its metrics")
		return nil
	}
	return []prometheus.Metric{
		prometheus.MustNewConstMetric(volumeUsedDesc, prometheus.GaugeValue, float64(size-min(free, size))),
		prometheus.MustNewConstMetric(volumeFreeDesc, prometheus.GaugeValue, float64(free)),
	}
}

// metricsServer is what the first query of a scrape says of the server.
type metricsServer struct {
	// version is server_version_num, such as 150008.
	version        int
	recovery       bool
	maxConnections float64
	walPosition    float64
	// startTime is the last start or crash restart, in seconds since the
	// epoch.
	startTime float64
}

// role is the role the server runs as.
func (s metricsServer) role() agentapi.Role {
	if s.recovery {
		return agentapi.RoleReplica
	}
	return agentapi.RolePrimary
}

// readMetricsServer runs metricsServerSQL: its answer is the server's up.
func readMetricsServer(ctx context.Context, conn *pgx.Conn) (metricsServer, error) {
	var s metricsServer
	if err := conn.QueryRow(ctx, metricsServerSQL).Scan(&s.version, &s.recovery, &s.maxConnections, &s.walPosition, &s.startTime); err != nil {
		return s, fmt.Errorf("reading the server's role and version: %w", err)
	}
	return s, nil
}

// metricsQuery is one query of a scrape and what it reports; what names
// it in the error of a failed one.
type metricsQuery struct {
	what string
	read func(ctx context.Context, conn *pgx.Conn, b *metricsBatch) error
}

// metricsQueries are the scrape's queries for srv: the replication ones
// depend on its role, the checkpoints' on its version.
func metricsQueries(srv metricsServer) []metricsQuery {
	qs := []metricsQuery{
		{"connection", readConnections},
		{"oldest transaction", readOldestTransaction},
		{"database", readDatabases},
		{"lock", readLocks},
		{"checkpoint", func(ctx context.Context, conn *pgx.Conn, b *metricsBatch) error {
			return readCheckpoints(ctx, conn, b, srv.version)
		}},
		{"archiver", readArchiver},
	}
	if srv.recovery {
		return append(qs, metricsQuery{"standby", readStandby})
	}
	return append(qs, metricsQuery{"replication", readReplication})
}

// metricsBatch gathers the samples of one query. A sample Prometheus
// refuses (a database name that is not UTF-8, say) is left out and the
// first such error kept: the query's other samples are still reported.
type metricsBatch struct {
	samples []prometheus.Metric
	err     error
}

// add appends a sample of d, keeping the first error.
func (b *metricsBatch) add(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	s, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		b.err = cmp.Or(b.err, err)
		return
	}
	b.samples = append(b.samples, s)
}

// gauge appends a gauge sample of d.
func (b *metricsBatch) gauge(d *prometheus.Desc, v float64, labels ...string) {
	b.add(d, prometheus.GaugeValue, v, labels...)
}

// counter appends a counter sample of d.
func (b *metricsBatch) counter(d *prometheus.Desc, v float64, labels ...string) {
	b.add(d, prometheus.CounterValue, v, labels...)
}

// forEachRow runs sql on conn, scans each row into dest and calls fn.
func forEachRow(ctx context.Context, conn *pgx.Conn, sql string, dest []any, fn func()) error {
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return err
	}
	_, err = pgx.ForEachRow(rows, dest, func() error { fn(); return nil })
	return err
}

// readConnections reports the client backends by state.
func readConnections(ctx context.Context, conn *pgx.Conn, b *metricsBatch) error {
	counts := map[string]float64{}
	var state string
	var n float64
	if err := forEachRow(ctx, conn, metricsConnectionsSQL, []any{&state, &n}, func() { counts[state] = n }); err != nil {
		return err
	}
	states := append([]string{}, connectionStates...)
	for s := range counts {
		if !slices.Contains(states, s) {
			states = append(states, s)
		}
	}
	for _, s := range states {
		b.gauge(connectionsDesc, counts[s], s)
	}
	return nil
}

// readOldestTransaction reports the oldest open transaction's age.
func readOldestTransaction(ctx context.Context, conn *pgx.Conn, b *metricsBatch) error {
	var age float64
	if err := conn.QueryRow(ctx, metricsOldestXactSQL).Scan(&age); err != nil {
		return err
	}
	b.gauge(oldestXactDesc, age)
	return nil
}

// readDatabases reports each database's commits, rollbacks, size and
// transaction-ID age; a size PostgreSQL cannot tell (a database dropped
// meanwhile) is left out.
func readDatabases(ctx context.Context, conn *pgx.Conn, b *metricsBatch) error {
	var name string
	var commits, rollbacks, xidAge float64
	var size *float64
	return forEachRow(ctx, conn, metricsDatabasesSQL, []any{&name, &commits, &rollbacks, &size, &xidAge}, func() {
		b.counter(commitsDesc, commits, name)
		b.counter(rollbacksDesc, rollbacks, name)
		if size != nil {
			b.gauge(databaseSizeDesc, *size, name)
		}
		b.gauge(xidAgeDesc, xidAge, name)
	})
}

// readLocks reports the locks not granted.
func readLocks(ctx context.Context, conn *pgx.Conn, b *metricsBatch) error {
	var n float64
	if err := conn.QueryRow(ctx, metricsLocksSQL).Scan(&n); err != nil {
		return err
	}
	b.gauge(locksWaitingDesc, n)
	return nil
}

// readCheckpoints reports the timed and requested checkpoints of a server
// of version.
func readCheckpoints(ctx context.Context, conn *pgx.Conn, b *metricsBatch, version int) error {
	var timed, requested float64
	if err := conn.QueryRow(ctx, metricsCheckpointsSQL(version)).Scan(&timed, &requested); err != nil {
		return err
	}
	b.counter(checkpointsDesc, timed, "timed")
	b.counter(checkpointsDesc, requested, "requested")
	return nil
}

// readReplication reports, on a primary, each standby's lag; a position
// the standby has not reported yet is left out.
func readReplication(ctx context.Context, conn *pgx.Conn, b *metricsBatch) error {
	var name string
	var sent, flush, replay *float64
	var seconds float64
	return forEachRow(ctx, conn, metricsReplicationSQL, []any{&name, &sent, &flush, &replay, &seconds}, func() {
		for _, p := range []struct {
			position string
			lag      *float64
		}{{"sent", sent}, {"flush", flush}, {"replay", replay}} {
			if p.lag != nil {
				b.gauge(replicationLagDesc, *p.lag, name, p.position)
			}
		}
		b.gauge(replicationReplayLagDesc, seconds, name)
	})
}

// readStandby reports, on a standby, its replay lag and whether it
// streams.
func readStandby(ctx context.Context, conn *pgx.Conn, b *metricsBatch) error {
	var lagBytes, lagSeconds float64
	var streaming bool
	if err := conn.QueryRow(ctx, metricsStandbySQL).Scan(&lagBytes, &lagSeconds, &streaming); err != nil {
		return err
	}
	b.gauge(standbyLagDesc, lagBytes)
	b.gauge(standbyLagSecondsDesc, lagSeconds)
	b.gauge(standbyStreamingDesc, boolGauge(streaming))
	return nil
}

// readArchiver reports the WAL archiver's counts and its last archived
// segment's age.
func readArchiver(ctx context.Context, conn *pgx.Conn, b *metricsBatch) error {
	var archived, failed float64
	var age *float64
	if err := conn.QueryRow(ctx, metricsArchiverSQL).Scan(&archived, &failed, &age); err != nil {
		return err
	}
	b.counter(archivedDesc, archived)
	b.counter(archiveFailedDesc, failed)
	if age != nil {
		b.gauge(lastArchivedAgeDesc, *age)
	}
	return nil
}

// boolGauge is 1 for true, 0 for false.
func boolGauge(v bool) float64 {
	if v {
		return 1
	}
	return 0
}
