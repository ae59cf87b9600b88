// Package configuration is the controller of a Database's PostgreSQL
// parameters (spec.postgresql.parameters): it sends them to the agent of
// every running instance, which writes them with ALTER SYSTEM (so that
// PostgreSQL itself checks each name and value) and reloads; it reports
// what PostgreSQL refused and what waits for a restart in
// ConfigurationReady, and publishes status.configuration.restartRevision
// once every instance has written the restart-only ones, which the
// statefulset controller puts on the pods' template so that they restart
// in the usual order. See docs/design/parameters.md.
package configuration
