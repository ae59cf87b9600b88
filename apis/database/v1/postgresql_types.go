package v1

// PostgreSQLSpec tunes the PostgreSQL server of every instance.
type PostgreSQLSpec struct {
	// Parameters are postgresql.conf settings, name → value, as
	// PostgreSQL writes them ("work_mem": "64MB",
	// "log_min_duration_statement": "250ms"). PostgreSQL itself checks
	// each one (ALTER SYSTEM on every instance) before it reaches a
	// running server: a name or value it refuses is left out and
	// ConfigurationReady names it with PostgreSQL's message. Parameters
	// that need only a reload take effect without a restart; those that
	// need one (pg_settings.context postmaster, such as shared_buffers or
	// max_connections) roll out in the usual order (standbys, one
	// switchover, the former primary), and status.configuration lists
	// them until then. The settings dbkeeper keeps itself (listening,
	// TLS, authentication files, replication, archiving and recovery, WAL
	// safety, logging destinations, shared_preload_libraries) are refused
	// here with their names.
	// +optional
	// +kubebuilder:validation:MaxProperties=256
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[a-z][a-z0-9_]*([.][a-z][a-z0-9_]*)?$'))",message="spec.postgresql.parameters: a parameter name is lower-case letters, digits and _, with one . for an extension's parameter (PostgreSQL's names are case-insensitive: write them in lower case)"
	// +kubebuilder:validation:XValidation:rule="!('listen_addresses' in self)",message="spec.postgresql.parameters: dbkeeper sets listen_addresses itself (listening)"
	// +kubebuilder:validation:XValidation:rule="!('port' in self)",message="spec.postgresql.parameters: dbkeeper sets port itself (listening)"
	// +kubebuilder:validation:XValidation:rule="!('config_file' in self)",message="spec.postgresql.parameters: dbkeeper sets config_file itself (where its files are)"
	// +kubebuilder:validation:XValidation:rule="!('data_directory' in self)",message="spec.postgresql.parameters: dbkeeper sets data_directory itself (where its files are)"
	// +kubebuilder:validation:XValidation:rule="!('hba_file' in self)",message="spec.postgresql.parameters: dbkeeper sets hba_file itself (where its files are)"
	// +kubebuilder:validation:XValidation:rule="!('ident_file' in self)",message="spec.postgresql.parameters: dbkeeper sets ident_file itself (where its files are)"
	// +kubebuilder:validation:XValidation:rule="!('external_pid_file' in self)",message="spec.postgresql.parameters: dbkeeper sets external_pid_file itself (where its files are)"
	// +kubebuilder:validation:XValidation:rule="!('cluster_name' in self)",message="spec.postgresql.parameters: dbkeeper sets cluster_name itself (replication)"
	// +kubebuilder:validation:XValidation:rule="!('hot_standby' in self)",message="spec.postgresql.parameters: dbkeeper sets hot_standby itself (replication)"
	// +kubebuilder:validation:XValidation:rule="!('max_slot_wal_keep_size' in self)",message="spec.postgresql.parameters: dbkeeper sets max_slot_wal_keep_size itself (replication)"
	// +kubebuilder:validation:XValidation:rule="!('primary_conninfo' in self)",message="spec.postgresql.parameters: dbkeeper sets primary_conninfo itself (replication)"
	// +kubebuilder:validation:XValidation:rule="!('primary_slot_name' in self)",message="spec.postgresql.parameters: dbkeeper sets primary_slot_name itself (replication)"
	// +kubebuilder:validation:XValidation:rule="!('promote_trigger_file' in self)",message="spec.postgresql.parameters: dbkeeper sets promote_trigger_file itself (replication)"
	// +kubebuilder:validation:XValidation:rule="!('synchronous_standby_names' in self)",message="spec.postgresql.parameters: dbkeeper sets synchronous_standby_names itself (replication)"
	// +kubebuilder:validation:XValidation:rule="!('wal_level' in self)",message="spec.postgresql.parameters: dbkeeper sets wal_level itself (replication)"
	// +kubebuilder:validation:XValidation:rule="!('wal_retrieve_retry_interval' in self)",message="spec.postgresql.parameters: dbkeeper sets wal_retrieve_retry_interval itself (replication)"
	// +kubebuilder:validation:XValidation:rule="!('archive_cleanup_command' in self)",message="spec.postgresql.parameters: dbkeeper sets archive_cleanup_command itself (archiving and recovery; spec.backup tunes them)"
	// +kubebuilder:validation:XValidation:rule="!('archive_command' in self)",message="spec.postgresql.parameters: dbkeeper sets archive_command itself (archiving and recovery; spec.backup tunes them)"
	// +kubebuilder:validation:XValidation:rule="!('archive_library' in self)",message="spec.postgresql.parameters: dbkeeper sets archive_library itself (archiving and recovery; spec.backup tunes them)"
	// +kubebuilder:validation:XValidation:rule="!('archive_mode' in self)",message="spec.postgresql.parameters: dbkeeper sets archive_mode itself (archiving and recovery; spec.backup tunes them)"
	// +kubebuilder:validation:XValidation:rule="!('archive_timeout' in self)",message="spec.postgresql.parameters: dbkeeper sets archive_timeout itself (archiving and recovery; spec.backup tunes them)"
	// +kubebuilder:validation:XValidation:rule="!('recovery_end_command' in self)",message="spec.postgresql.parameters: dbkeeper sets recovery_end_command itself (archiving and recovery; spec.backup tunes them)"
	// +kubebuilder:validation:XValidation:rule="!('restore_command' in self)",message="spec.postgresql.parameters: dbkeeper sets restore_command itself (archiving and recovery; spec.backup tunes them)"
	// +kubebuilder:validation:XValidation:rule="!('fsync' in self)",message="spec.postgresql.parameters: dbkeeper sets fsync itself (WAL safety: crash recovery and pg_rewind need them on)"
	// +kubebuilder:validation:XValidation:rule="!('full_page_writes' in self)",message="spec.postgresql.parameters: dbkeeper sets full_page_writes itself (WAL safety: crash recovery and pg_rewind need them on)"
	// +kubebuilder:validation:XValidation:rule="!('wal_log_hints' in self)",message="spec.postgresql.parameters: dbkeeper sets wal_log_hints itself (WAL safety: crash recovery and pg_rewind need them on)"
	// +kubebuilder:validation:XValidation:rule="!('log_destination' in self)",message="spec.postgresql.parameters: dbkeeper sets log_destination itself (logging to the container's output)"
	// +kubebuilder:validation:XValidation:rule="!('log_directory' in self)",message="spec.postgresql.parameters: dbkeeper sets log_directory itself (logging to the container's output)"
	// +kubebuilder:validation:XValidation:rule="!('log_filename' in self)",message="spec.postgresql.parameters: dbkeeper sets log_filename itself (logging to the container's output)"
	// +kubebuilder:validation:XValidation:rule="!('logging_collector' in self)",message="spec.postgresql.parameters: dbkeeper sets logging_collector itself (logging to the container's output)"
	// +kubebuilder:validation:XValidation:rule="!('log_rotation_age' in self)",message="spec.postgresql.parameters: dbkeeper sets log_rotation_age itself (logging to the container's output)"
	// +kubebuilder:validation:XValidation:rule="!('log_rotation_size' in self)",message="spec.postgresql.parameters: dbkeeper sets log_rotation_size itself (logging to the container's output)"
	// +kubebuilder:validation:XValidation:rule="!('log_truncate_on_rotation' in self)",message="spec.postgresql.parameters: dbkeeper sets log_truncate_on_rotation itself (logging to the container's output)"
	// +kubebuilder:validation:XValidation:rule="!('shared_preload_libraries' in self)",message="spec.postgresql.parameters: dbkeeper sets shared_preload_libraries itself (the libraries its features load)"
	// +kubebuilder:validation:XValidation:rule="!('allow_system_table_mods' in self)",message="spec.postgresql.parameters: dbkeeper sets allow_system_table_mods itself (catalog safety)"
	// +kubebuilder:validation:XValidation:rule="!self.exists(k, k.startsWith('ssl'))",message="spec.postgresql.parameters: dbkeeper sets the ssl* parameters itself (TLS; spec.tls tunes it)"
	// +kubebuilder:validation:XValidation:rule="!self.exists(k, k.startsWith('recovery_target'))",message="spec.postgresql.parameters: dbkeeper sets the recovery_target* parameters itself (recovery; spec.bootstrap.recovery.target sets them)"
	// +kubebuilder:validation:XValidation:rule="!self.exists(k, k.startsWith('unix_socket_'))",message="spec.postgresql.parameters: dbkeeper sets the unix_socket_* parameters itself (listening)"
	Parameters map[string]ParameterValue `json:"parameters,omitempty"`

	// Extensions are the PostgreSQL extensions the extensions controller
	// creates in the application's database, as the superuser (the
	// application's role gets no privilege for it), and keeps at their
	// version; ExtensionsReady reports them. An extension the image does
	// not carry (pg_available_extensions) is reported by name, never
	// half-created. Those that need their library in
	// shared_preload_libraries (pg_stat_statements, pgaudit) put it there:
	// a restart that rolls out in the usual order (standbys, one
	// switchover, the former primary), after which the extension is
	// created. An extension that leaves this list stays on the server as
	// it is (with whatever depends on it, such as a vector column); only
	// ensure: Absent drops one, without CASCADE, so a drop that would take
	// a user's object with it is refused and reported. One whose library is
	// preloaded leaves the list only once it was Absent: its library stays
	// loaded while the entry is there, since such an extension fails every
	// use (pgaudit: every DDL statement) without it.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Extensions []ExtensionSpec `json:"extensions,omitempty"`
}

// ExtensionSpec is one extension of spec.postgresql.extensions.
type ExtensionSpec struct {
	// Name is the extension's name as CREATE EXTENSION takes it (vector,
	// pg_stat_statements, pgaudit, hstore, ...).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_-]*$`
	Name string `json:"name"`

	// Version is the extension's version (ALTER EXTENSION ... UPDATE TO it
	// when another is installed); empty: the image's default version at
	// creation, and the installed version left alone afterwards.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]*$`
	// +optional
	Version string `json:"version,omitempty"`

	// Schema is the schema the extension's objects go in (CREATE EXTENSION
	// ... SCHEMA; it must exist); one installed elsewhere is moved (ALTER
	// EXTENSION ... SET SCHEMA, which PostgreSQL refuses for an extension
	// that is not relocatable: ExtensionRefused). Empty: the first schema
	// of the search path (public) at creation, and where it is afterwards.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_$]*$`
	// +optional
	Schema string `json:"schema,omitempty"`

	// Ensure is Present (the default: created when missing) or Absent
	// (dropped without CASCADE: refused, and reported, while an object of
	// the database depends on it).
	// +kubebuilder:default=Present
	// +optional
	Ensure Ensure `json:"ensure,omitempty"`
}

// Present says whether the extension is to exist.
func (e ExtensionSpec) Present() bool { return e.Ensure != EnsureAbsent }

// PreloadLibraries maps the extensions that work only with their library in
// shared_preload_libraries to that library. The CEL rule of
// PostgreSQLSpec.Extensions lists the same (a test holds them together).
var PreloadLibraries = map[string]string{
	"pg_stat_statements": "pg_stat_statements",
	"pgaudit":            "pgaudit",
}

// ParameterValue is a parameter's value as postgresql.conf holds it.
// +kubebuilder:validation:MaxLength=4096
type ParameterValue string

// OwnedParameters are the parameters dbkeeper sets itself, which
// spec.postgresql.parameters may not name (beside the prefixes of
// OwnedParameterPrefixes); the field has a CEL rule for each (a test holds them together).
var OwnedParameters = []string{
	"allow_system_table_mods", "archive_cleanup_command", "archive_command", "archive_library", "archive_mode",
	"archive_timeout", "cluster_name", "config_file", "data_directory", "external_pid_file", "fsync",
	"full_page_writes", "hba_file", "hot_standby", "ident_file", "listen_addresses", "log_destination",
	"log_directory", "log_filename", "log_rotation_age", "log_rotation_size", "log_truncate_on_rotation",
	"logging_collector", "max_slot_wal_keep_size", "port", "primary_conninfo",
	"primary_slot_name", "promote_trigger_file", "recovery_end_command", "restore_command",
	"shared_preload_libraries", "synchronous_standby_names", "wal_level", "wal_log_hints",
	"wal_retrieve_retry_interval",
}

// OwnedParameterPrefixes begin the names of parameters dbkeeper sets
// itself (TLS, recovery targets, the socket).
var OwnedParameterPrefixes = []string{"ssl", "recovery_target", "unix_socket_"}

// ConfigurationStatus is what the instances did with
// spec.postgresql.parameters.
type ConfigurationStatus struct {
	// PendingRestart are the parameters every instance has written that
	// some instance applies only at its next start; the restart rolls out
	// in the usual order.
	// +optional
	// +listType=set
	PendingRestart []string `json:"pendingRestart,omitempty"`

	// RestartRevision identifies the values of the restart-only
	// parameters once every instance has written them: the pods'
	// template carries it, so that a new value restarts the instances in
	// the usual order.
	// +optional
	RestartRevision string `json:"restartRevision,omitempty"`
}
