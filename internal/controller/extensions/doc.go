// Package extensions is the controller of spec.postgresql.extensions: it
// connects to the primary as the superuser, in the application's
// database, reads what the image offers and what is installed
// (pg_available_extensions, pg_available_extension_versions, and the
// running shared_preload_libraries), plans the statements that bring the
// database in line with a pure planner (plan.go), runs them, and reports
// in ExtensionsReady.
//
// What it never does: make the application's role a superuser or give it
// anything (the superuser creates the extension; its functions and types
// are usable by everyone, as PostgreSQL grants them); drop an extension
// that left the spec (it stays as it is); drop one with CASCADE (an
// Absent extension that something depends on, such as a vector column, is
// refused by PostgreSQL and reported); create one whose library must be
// preloaded before the running server loaded it (the configuration
// controller puts the library in shared_preload_libraries, and the restart
// rolls out first).
package extensions
