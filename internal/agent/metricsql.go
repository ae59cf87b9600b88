package agent

// The queries of the PostgreSQL metrics (metrics.go), each small and read
// only, all on the one connection of a scrape. Numbers come back as
// float8, the type of a Prometheus sample; LSN differences are bytes.

// metricsServerSQL reads the server's version, whether it is in recovery,
// its max_connections, its WAL position (pg_current_wal_lsn() on a
// primary, on a standby the last position received, the last replayed
// when it never streamed) and when it last started: its checkpointer's
// start, which a crash of any server process renews (the postmaster then
// restarts every other process and recovers, keeping its own start time),
// else the postmaster's.
const metricsServerSQL = `SELECT current_setting('server_version_num')::int,
	pg_is_in_recovery(),
	current_setting('max_connections')::float8,
	pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery()
		THEN COALESCE(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())
		ELSE pg_current_wal_lsn() END, '0/0')::float8,
	extract(epoch FROM COALESCE(
		(SELECT max(backend_start) FROM pg_stat_activity WHERE backend_type = 'checkpointer'),
		pg_postmaster_start_time()))::float8`

// metricsConnectionsSQL counts the client backends by state, less the
// scrape's own connection.
const metricsConnectionsSQL = `SELECT state, count(*)::float8 FROM pg_stat_activity
	WHERE backend_type = 'client backend' AND state IS NOT NULL AND pid <> pg_backend_pid()
	GROUP BY state`

// metricsOldestXactSQL is the age in seconds of the oldest transaction a
// client backend holds open, 0 when none does.
const metricsOldestXactSQL = `SELECT COALESCE(max(extract(epoch FROM clock_timestamp() - xact_start)), 0)::float8
	FROM pg_stat_activity
	WHERE backend_type = 'client backend' AND xact_start IS NOT NULL AND pid <> pg_backend_pid()`

// metricsDatabasesSQL reads each database's commits, rollbacks, size in
// bytes and transaction-ID age (age(datfrozenxid)), templates and
// databases left invalid by an interrupted DROP DATABASE excepted.
const metricsDatabasesSQL = `SELECT d.datname, s.xact_commit::float8, s.xact_rollback::float8,
	pg_database_size(d.oid)::float8, age(d.datfrozenxid)::float8
	FROM pg_database d JOIN pg_stat_database s ON s.datid = d.oid
	WHERE NOT d.datistemplate AND d.datconnlimit <> -2`

// metricsLocksSQL counts the locks requested and not granted.
const metricsLocksSQL = `SELECT count(*)::float8 FROM pg_locks WHERE NOT granted`

// metricsCheckpointsSQL reads the timed and requested checkpoints of a
// server of version (server_version_num), restartpoints included (a
// standby's): PostgreSQL 17 moved them from pg_stat_bgwriter, which
// counted both, to pg_stat_checkpointer, which counts restartpoints
// apart.
func metricsCheckpointsSQL(version int) string {
	if version >= 170000 {
		return `SELECT (num_timed + restartpoints_timed)::float8, (num_requested + restartpoints_req)::float8
	FROM pg_stat_checkpointer`
	}
	return `SELECT checkpoints_timed::float8, checkpoints_req::float8 FROM pg_stat_bgwriter`
}

// metricsReplicationSQL reads, on a primary, each standby's lag in bytes
// behind the current WAL position (sent, flushed, replayed; NULL until
// the standby reports it) and its replay lag in seconds (PostgreSQL
// clears it to NULL once the standby caught up and no WAL comes: 0). One
// row per application_name, its most advanced sender's; base backups'
// senders are left out.
const metricsReplicationSQL = `SELECT DISTINCT ON (application_name) application_name,
	pg_wal_lsn_diff(pg_current_wal_lsn(), sent_lsn)::float8,
	pg_wal_lsn_diff(pg_current_wal_lsn(), flush_lsn)::float8,
	pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::float8,
	COALESCE(extract(epoch FROM replay_lag), 0)::float8
	FROM pg_stat_replication
	WHERE state <> 'backup'
	ORDER BY application_name, replay_lsn DESC NULLS LAST`

// metricsStandbySQL reads, on a standby, the WAL received and not replayed
// yet in bytes, the seconds since the last replayed transaction committed
// on the primary while replay is behind what was received (0 when caught
// up, or when the standby never streamed and cannot tell), and whether
// its WAL receiver streams.
const metricsStandbySQL = `SELECT
	GREATEST(COALESCE(pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()), 0), 0)::float8,
	CASE WHEN pg_last_wal_receive_lsn() IS NULL OR pg_last_wal_replay_lsn() IS NULL
			OR pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn() THEN 0
		ELSE COALESCE(GREATEST(extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp()), 0), 0)
	END::float8,
	COALESCE((SELECT status = 'streaming' FROM pg_stat_wal_receiver), false)`

// metricsArchiverSQL reads the WAL segments archived and the attempts
// that failed since the statistics were reset, and the age in seconds of
// the last archived segment (NULL when none was).
const metricsArchiverSQL = `SELECT archived_count::float8, failed_count::float8,
	extract(epoch FROM clock_timestamp() - last_archived_time)::float8
	FROM pg_stat_archiver`
