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
