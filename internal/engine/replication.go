package engine

// Replication is how an engine's server runs under the instance agent and
// streams to hot standbys, embedded in Engine.
type Replication interface {
	// Entrypoint is the image's entrypoint, which the agent runs (with
	// ServerArgs) as the server: the container's command is the agent,
	// which replaces the image's entrypoint, so it is named again.
	Entrypoint() []string
	// ServerArgs are the arguments of Entrypoint that start the server
	// ready to be a primary with standbys or a standby itself. TLS.TLSArgs
	// follow them when TLS is on; the agent adds what depends on the
	// instance (its port, socket, role, and the WAL a slot may keep,
	// from the size of its volume).
	ServerArgs() []string
}

// Entrypoint implements Replication: the official image's entrypoint
// script, which runs initdb on an empty data directory (with
// POSTGRES_USER and POSTGRES_PASSWORD) and then execs the server.
func (Postgres) Entrypoint() []string { return []string{"docker-entrypoint.sh"} }

// ServerArgs implements Replication: "postgres" with wal_log_hints=on, so
// that pg_rewind can bring a former primary back as a standby of the new
// one instead of cloning it again. max_slot_wal_keep_size is the agent's
// (a quarter of the volume it finds, so that growing the volume changes
// no pod template and restarts nothing).
//
// The defaults cover the rest for up to 9 instances (the most
// spec.replicas allows): wal_level=replica and hot_standby=on, and
// max_wal_senders=10 and max_replication_slots=10 leave room for 8
// standbys' slots and senders plus a pg_basebackup clone (one sender and
// one temporary slot for its WAL stream besides the base backup's sender;
// the StatefulSet starts one pod at a time, so one clone runs at once).
func (Postgres) ServerArgs() []string {
	return []string{"postgres", "-c", "wal_log_hints=on"}
}
