// Package roles is the controller of the roles and databases a Database
// declares beside the application's own (spec.roles, spec.databases). It
// connects to the primary as the superuser, the way the secret controller
// does, reads what the server has (pg_roles, pg_auth_members,
// pg_database, pg_shdepend, pg_stat_activity), plans the statements that
// bring it in line with a pure planner (plan.go: desired spec and observed
// catalog in, ordered statements out, every name quoted), runs them, and
// reports in RolesReady and status.roles.
//
// What it never does: drop a role or database that left the spec (it is
// released: left as it is, listed in status.roles); drop a database
// somebody is connected to (no WITH (FORCE)); drop a role that owns
// anything (its objects would go, or change hands behind the user's
// back); give a role SUPERUSER, REPLICATION or BYPASSRLS unless the
// manager runs with --allow-privileged-roles; write or log a password
// (they are set as SCRAM verifiers in a transaction that keeps them out of
// the server's log, and compared with the verifier the server holds, so
// that a password is written only when it differs).
package roles
