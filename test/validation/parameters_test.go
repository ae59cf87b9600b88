package validation_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// TestParametersRefusedAtAdmission: spec.postgresql.parameters may not name
// a parameter dbkeeper sets itself (every name of dbv1.OwnedParameters and
// a name under each prefix, so that the CEL rule and the Go list cannot
// drift apart) nor a name PostgreSQL's files could not hold; the message
// names the offending parameters.
func TestParametersRefusedAtAdmission(t *testing.T) {
	ctx, ns := setup(t)
	params := func(kv ...string) map[string]any {
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return map[string]any{"postgresql": map[string]any{"parameters": m}}
	}
	for _, name := range dbv1.OwnedParameters {
		err := k8s.Create(ctx, rawDatabase(ns, "owned", params("work_mem", "8MB", name, "1")))
		assertInvalid(t, err, "spec.postgresql.parameters: dbkeeper sets "+name+" itself (")
		assert.NotContains(t, err.Error(), "work_mem", "the message names the refused parameters only")
	}
	for _, prefix := range dbv1.OwnedParameterPrefixes {
		err := k8s.Create(ctx, rawDatabase(ns, "owned", params(prefix+"_x", "1")))
		assertInvalid(t, err, "spec.postgresql.parameters: dbkeeper sets the "+prefix+"* parameters itself (")
	}
	err := k8s.Create(ctx, rawDatabase(ns, "two-owned", params("port", "5433", "ssl", "off", "work_mem", "8MB")))
	assertInvalid(t, err, "dbkeeper sets port itself", "dbkeeper sets the ssl* parameters itself")

	for _, name := range []string{"Work_Mem", "work-mem", "a.b.c", "1abc", ".x", "pg_stat_statements."} {
		err := k8s.Create(ctx, rawDatabase(ns, "bad-name", params(name, "1")))
		assertInvalid(t, err, "spec.postgresql.parameters: a parameter name is lower-case letters")
	}
	err = k8s.Create(ctx, rawDatabase(ns, "long-value", params("application_name", strings.Repeat("x", 4097))))
	assertInvalid(t, err, "spec.postgresql.parameters.application_name: Too long: may not be more than 4096")
}

// TestParametersAccepted: ordinary parameters, an extension's (with a dot)
// and a value PostgreSQL will judge (admission does not copy its rules).
func TestParametersAccepted(t *testing.T) {
	ctx, ns := setup(t)
	require.NoError(t, k8s.Create(ctx, rawDatabase(ns, "tuned", map[string]any{"postgresql": map[string]any{"parameters": map[string]any{
		"work_mem": "64MB", "shared_buffers": "256MB", "max_connections": "200", "log_min_duration_statement": "250ms",
		"pg_stat_statements.max": "10000", "work_mem_typo": "1XB",
	}}})))
}

// TestExtensionsAtAdmission: an extension's name, version and ensure are
// checked, a name appears once; an extension whose library is preloaded
// (every one of dbv1.PreloadLibraries, so that the CEL rule and the Go
// map cannot drift apart) leaves the list only once it was Absent, any
// other leaves it freely.
func TestExtensionsAtAdmission(t *testing.T) {
	ctx, ns := setup(t)
	exts := func(e ...map[string]any) map[string]any {
		list := make([]any, len(e))
		for i := range e {
			list[i] = e[i]
		}
		return map[string]any{"postgresql": map[string]any{"extensions": list}}
	}
	ext := func(name string, kv ...string) map[string]any {
		m := map[string]any{"name": name}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	assertInvalid(t, k8s.Create(ctx, rawDatabase(ns, "bad-name", exts(ext("Vector")))), "spec.postgresql.extensions[0].name")
	assertInvalid(t, k8s.Create(ctx, rawDatabase(ns, "bad-version", exts(ext("vector", "version", "1.0; DROP")))), "spec.postgresql.extensions[0].version")
	assertInvalid(t, k8s.Create(ctx, rawDatabase(ns, "bad-ensure", exts(ext("vector", "ensure", "Gone")))), "spec.postgresql.extensions[0].ensure")
	assertInvalid(t, k8s.Create(ctx, rawDatabase(ns, "twice", exts(ext("vector"), ext("vector", "version", "0.8.0")))), "Duplicate value")

	for name := range dbv1.PreloadLibraries {
		obj := rawDatabase(ns, "preload-"+strings.ReplaceAll(name, "_", "-"), exts(ext(name), ext("hstore")))
		require.NoError(t, k8s.Create(ctx, obj))
		// hstore leaves freely; the preloaded one may not
		obj.Object["spec"] = exts(ext(name))
		require.NoError(t, k8s.Update(ctx, obj))
		obj.Object["spec"] = exts(ext("hstore"))
		assertInvalid(t, k8s.Update(ctx, obj), "spec.postgresql.extensions: an extension whose library is in shared_preload_libraries")
		obj.Object["spec"] = map[string]any{}
		assertInvalid(t, k8s.Update(ctx, obj), "leaves the list only after ensure: Absent")
		obj.Object["spec"] = exts(ext(name, "ensure", "Absent"))
		require.NoError(t, k8s.Update(ctx, obj))
		obj.Object["spec"] = map[string]any{}
		require.NoError(t, k8s.Update(ctx, obj), "once Absent, %s leaves the list", name)
	}
}

// TestTopStatementsAtAdmission: spec.monitoring.topStatements is 0 to 100
// and needs pg_stat_statements in spec.postgresql.extensions, present.
func TestTopStatementsAtAdmission(t *testing.T) {
	ctx, ns := setup(t)
	spec := func(n int, extensions ...map[string]any) map[string]any {
		list := make([]any, len(extensions))
		for i := range extensions {
			list[i] = extensions[i]
		}
		s := map[string]any{"monitoring": map[string]any{"topStatements": n}}
		if len(list) > 0 {
			s["postgresql"] = map[string]any{"extensions": list}
		}
		return s
	}
	pgss := map[string]any{"name": "pg_stat_statements"}
	const needs = "spec.monitoring.topStatements needs pg_stat_statements in spec.postgresql.extensions"
	assertInvalid(t, k8s.Create(ctx, rawDatabase(ns, "no-extension", spec(10))), needs)
	assertInvalid(t, k8s.Create(ctx, rawDatabase(ns, "other-extension", spec(10, map[string]any{"name": "vector"}))), needs)
	assertInvalid(t, k8s.Create(ctx, rawDatabase(ns, "absent", spec(10, map[string]any{"name": "pg_stat_statements", "ensure": "Absent"}))), needs)
	assertInvalid(t, k8s.Create(ctx, rawDatabase(ns, "too-many", spec(101, pgss))), "spec.monitoring.topStatements: Invalid value: 101")
	assertInvalid(t, k8s.Create(ctx, rawDatabase(ns, "negative", spec(-1, pgss))), "spec.monitoring.topStatements: Invalid value: -1")
	require.NoError(t, k8s.Create(ctx, rawDatabase(ns, "top", spec(10, pgss))))
	require.NoError(t, k8s.Create(ctx, rawDatabase(ns, "none", spec(0))))
}

// TestDatabaseExtensionsAtAdmission: a database of spec.databases takes
// extensions, with a schema, but not those whose library is loaded for the
// whole server.
func TestDatabaseExtensionsAtAdmission(t *testing.T) {
	ctx, ns := setup(t)
	databases := func(ext map[string]any) map[string]any {
		return map[string]any{"databases": []any{map[string]any{"name": "reports", "extensions": []any{ext}}}}
	}
	for _, name := range []string{"pg_stat_statements", "pgaudit"} {
		assertInvalid(t, k8s.Create(ctx, rawDatabase(ns, "preload", databases(map[string]any{"name": name}))),
			"spec.databases[].extensions: pg_stat_statements and pgaudit load a library for the whole server")
	}
	assertInvalid(t, k8s.Create(ctx, rawDatabase(ns, "bad-schema", databases(map[string]any{"name": "hstore", "schema": "Ext; DROP"}))),
		"spec.databases[0].extensions[0].schema")
	require.NoError(t, k8s.Create(ctx, rawDatabase(ns, "reports", databases(map[string]any{"name": "hstore", "schema": "ext"}))))
}
