package v1

// Ensure says whether a role or database of spec.roles or spec.databases
// exists on the server.
// +kubebuilder:validation:Enum=Present;Absent
type Ensure string

const (
	// EnsurePresent: dbkeeper creates it when it is missing and keeps it as
	// the spec says.
	EnsurePresent Ensure = "Present"
	// EnsureAbsent: dbkeeper drops it, refusing when that would lose
	// something (a database with sessions, a role that owns objects).
	EnsureAbsent Ensure = "Absent"
)

// PredefinedRoles are the predefined roles of PostgreSQL a role of
// spec.roles may be a member of (inRoles); the others (running programs,
// reading or writing the server's files, creating subscriptions) are
// refused. pg_checkpoint needs PostgreSQL 15, pg_maintain 17. The CEL rule
// of RoleSpec.InRoles lists the same (a test holds them together).
var PredefinedRoles = []string{
	"pg_read_all_data", "pg_write_all_data", "pg_read_all_stats", "pg_stat_scan_tables",
	"pg_monitor", "pg_signal_backend", "pg_checkpoint", "pg_maintain",
}

// RoleSpec is a role dbkeeper keeps on the server beside the application's
// own (spec.credentials): a login for another service or a person, or a
// group role (login: false) that others are members of.
// +kubebuilder:validation:XValidation:rule="!has(self.inRoles) || !(self.name in self.inRoles)",message="spec.roles[].inRoles names the role itself: a role cannot be a member of itself"
type RoleSpec struct {
	// Name is the role's name: a PostgreSQL identifier in lower case
	// (letters, digits, _ and $, not starting with a digit), at most 63
	// bytes. postgres, names starting with pg_ (PostgreSQL's own), dbkeeper
	// and names starting with dbkeeper_ (dbkeeper's own), public, none and
	// the session names are refused, and so is the application's role: app
	// with generated credentials; with a Secret of your own (whose
	// username is only known once it is read) RolesReady says RoleRefused.
	// A role of that name made by hand before is taken over.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_$]*$`
	// +kubebuilder:validation:XValidation:rule="self != 'postgres' && !self.startsWith('pg_')",message="spec.roles[].name may not be postgres or start with pg_: PostgreSQL's own roles are not dbkeeper's to keep"
	// +kubebuilder:validation:XValidation:rule="self != 'dbkeeper' && !self.startsWith('dbkeeper_')",message="spec.roles[].name may not be dbkeeper or start with dbkeeper_: those are the roles dbkeeper itself logs in and replicates with"
	// +kubebuilder:validation:XValidation:rule="!(self in ['public', 'none', 'current_user', 'session_user', 'current_role'])",message="spec.roles[].name may not be public, none, current_user, session_user or current_role: PostgreSQL reserves them"
	Name string `json:"name"`

	// Ensure is Present (the default: created when missing and kept as
	// declared) or Absent (dropped). A role that leaves spec.roles is NOT
	// dropped: it is left on the server as it is, no longer kept
	// (status.roles.releasedRoles); only Absent drops one. An Absent role
	// that owns anything (a database, a table, any object in any database)
	// is not dropped: RolesReady says DropRefused and names where; hand
	// its objects over first (REASSIGN OWNED BY ... TO ...). Privileges it
	// merely holds are revoked with it (DROP OWNED BY, which then drops no
	// object).
	// +kubebuilder:default=Present
	// +optional
	Ensure Ensure `json:"ensure,omitempty"`

	// Login lets the role log in. Default true; false makes a group role,
	// which others get privileges through (inRoles).
	// +kubebuilder:default=true
	// +optional
	Login *bool `json:"login,omitempty"`

	// PasswordSecret names the key of a Secret in the Database's namespace
	// that holds the role's password; dbkeeper sets it on the server (as a
	// SCRAM-SHA-256 verifier, never logged) and again whenever the key's
	// value changes, and reads the Secret only: it never writes it. Like
	// spec.credentials.secretName, the Secret must consent: its
	// annotation database.dbkeeper.io/credentials-for lists this
	// Database. Without passwordSecret the role has no password (one set
	// by hand is removed), so it cannot log in with one: give such a role
	// login: false, or let it in another way.
	// +optional
	PasswordSecret *PasswordSecretRef `json:"passwordSecret,omitempty"`

	// InRoles are the roles this role is a member of, and so gets the
	// privileges of: PostgreSQL's predefined roles pg_read_all_data,
	// pg_write_all_data, pg_read_all_stats, pg_stat_scan_tables,
	// pg_monitor, pg_signal_backend, pg_checkpoint (PostgreSQL 15 and
	// later) and pg_maintain (17 and later), and other roles of spec.roles
	// (ensure Present). dbkeeper keeps this list exact for those: a
	// membership in a predefined role, in a role of spec.roles or in any
	// role with SUPERUSER, CREATEROLE, REPLICATION or BYPASSRLS that is not
	// listed here is revoked; memberships in other roles made by hand are
	// left alone.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z_][a-z0-9_$]*$`
	// +kubebuilder:validation:XValidation:rule="self.all(g, !g.startsWith('pg_') || g in ['pg_read_all_data', 'pg_write_all_data', 'pg_read_all_stats', 'pg_stat_scan_tables', 'pg_monitor', 'pg_signal_backend', 'pg_checkpoint', 'pg_maintain'])",message="spec.roles[].inRoles may name only the predefined roles pg_read_all_data, pg_write_all_data, pg_read_all_stats, pg_stat_scan_tables, pg_monitor, pg_signal_backend, pg_checkpoint and pg_maintain (the others run programs or reach the server's files), and roles of spec.roles"
	InRoles []string `json:"inRoles,omitempty"`

	// ConnectionLimit is how many sessions the role may have at once; -1
	// (the default) is no limit. It does not apply to superusers.
	// +kubebuilder:default=-1
	// +kubebuilder:validation:Minimum=-1
	// +kubebuilder:validation:Maximum=10000
	// +optional
	ConnectionLimit *int32 `json:"connectionLimit,omitempty"`

	// CreateDB lets the role create databases (which dbkeeper then does
	// not keep: only spec.databases are).
	// +optional
	CreateDB bool `json:"createdb,omitempty"`

	// Superuser makes the role a superuser. Refused unless a cluster
	// administrator started dbkeeper with --allow-privileged-roles (the
	// chart's allowPrivilegedRoles): a superuser can read the server's
	// files, run programs as the server and take over every database, so
	// writing a Database must not be enough to get one. When refused,
	// RolesReady says RoleRefused naming spec.roles[i].superuser and the
	// role is kept without it; the rest of the spec still applies.
	// +optional
	Superuser bool `json:"superuser,omitempty"`

	// Replication lets the role stream the server's WAL (every database's
	// data) and manage replication slots. Privileged: refused unless
	// --allow-privileged-roles, as superuser.
	// +optional
	Replication bool `json:"replication,omitempty"`

	// BypassRLS lets the role ignore every row-level security policy.
	// Privileged: refused unless --allow-privileged-roles, as superuser.
	// +optional
	BypassRLS bool `json:"bypassrls,omitempty"`
}

// PasswordSecretRef names the key of a Secret of the Database's namespace.
type PasswordSecretRef struct {
	// Name is the Secret's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// Key is the key of the Secret's data that holds the password;
	// default password.
	// +kubebuilder:default=password
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +optional
	Key string `json:"key,omitempty"`
}

// ServerDatabaseSpec is a database inside the server (what CREATE DATABASE
// makes) that dbkeeper keeps beside the application's own.
type ServerDatabaseSpec struct {
	// Name is the database's name: a PostgreSQL identifier in lower case
	// (letters, digits, _ and $, not starting with a digit), at most 63
	// bytes. postgres, template0 and template1 (initdb's) are refused, and
	// so is the application's database: app with generated credentials;
	// with a Secret of your own RolesReady says DatabaseRefused. A
	// database of that name made by hand before is taken over (its owner
	// set to owner).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_$]*$`
	// +kubebuilder:validation:XValidation:rule="!(self in ['postgres', 'template0', 'template1'])",message="spec.databases[].name may not be postgres, template0 or template1: initdb's databases are not dbkeeper's to keep"
	Name string `json:"name"`

	// Owner is the role that owns the database: a role of spec.roles
	// (ensure Present) or the application's role, which is the default.
	// Changing it changes the owner of the database, not of the objects
	// inside it.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_$]*$`
	// +optional
	Owner string `json:"owner,omitempty"`

	// Ensure is Present (the default: created when missing, its owner
	// kept) or Absent (dropped, with everything in it). A database that
	// leaves spec.databases is NOT dropped: it stays on the server with
	// its data, no longer kept (status.roles.releasedDatabases); only
	// Absent drops one. An Absent database is dropped only while nobody is
	// connected to it (dbkeeper does not use DROP DATABASE ... WITH
	// (FORCE), which would end the sessions of whoever still uses it):
	// RolesReady says DropRefused, naming the database and who is
	// connected, and dbkeeper tries again.
	// +kubebuilder:default=Present
	// +optional
	Ensure Ensure `json:"ensure,omitempty"`

	// Extensions are kept in this database as spec.postgresql.extensions
	// are in the application's (the extensions controller, ExtensionsReady),
	// once the database exists. pg_stat_statements and pgaudit, whose
	// library is loaded for the whole server, are only in
	// spec.postgresql.extensions: pg_stat_statements there reports every
	// database's statements.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(e, !(e.name in ['pg_stat_statements', 'pgaudit']))",message="spec.databases[].extensions: pg_stat_statements and pgaudit load a library for the whole server: list them in spec.postgresql.extensions (pg_stat_statements there reports the statements of every database)"
	Extensions []ExtensionSpec `json:"extensions,omitempty"`
}

// RolesStatus is what the roles controller keeps of spec.roles and
// spec.databases on the server.
type RolesStatus struct {
	// Roles are the roles of spec.roles (ensure Present) on the server.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	Roles []string `json:"roles,omitempty"`

	// Databases are the databases of spec.databases (ensure Present) on
	// the server.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	Databases []string `json:"databases,omitempty"`

	// ReleasedRoles are roles dbkeeper kept that have left spec.roles:
	// they are still on the server, as they were, and no longer kept.
	// Listed until they are dropped (by hand, or with ensure Absent) or
	// come back to spec.roles.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	ReleasedRoles []string `json:"releasedRoles,omitempty"`

	// ReleasedDatabases are databases dbkeeper kept that have left
	// spec.databases: they are still on the server with their data, no
	// longer kept. Listed until they are dropped or come back.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	ReleasedDatabases []string `json:"releasedDatabases,omitempty"`
}

// Present says whether the role should exist (ensure Present, the
// default).
func (r *RoleSpec) Present() bool { return r.Ensure != EnsureAbsent }

// CanLogin is login, or its default (true).
func (r *RoleSpec) CanLogin() bool { return r.Login == nil || *r.Login }

// Limit is connectionLimit, or its default (-1, no limit).
func (r *RoleSpec) Limit() int32 {
	if r.ConnectionLimit == nil {
		return -1
	}
	return *r.ConnectionLimit
}

// PasswordKey is the Secret's key of passwordSecret, or its default.
func (p *PasswordSecretRef) PasswordKey() string {
	if p.Key == "" {
		return "password"
	}
	return p.Key
}

// Present says whether the database should exist (ensure Present, the
// default).
func (d *ServerDatabaseSpec) Present() bool { return d.Ensure != EnsureAbsent }
