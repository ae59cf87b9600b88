package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseControllers(t *testing.T) {
	known := []string{"statefulset", "service", "secret", "backup", "tls", "replication", "cleanup", "readiness"}
	tests := []struct {
		value   string
		enabled []string
		err     string
	}{
		{value: "*", enabled: known},
		{value: "", enabled: known},
		{value: "statefulset,service", enabled: []string{"statefulset", "service"}},
		{value: " service , statefulset ", enabled: []string{"statefulset", "service"}},
		{value: "*,-backup", enabled: []string{"statefulset", "service", "secret", "tls", "replication", "cleanup", "readiness"}},
		{value: "-backup", enabled: []string{"statefulset", "service", "secret", "tls", "replication", "cleanup", "readiness"}},
		{value: "-backup,-cleanup", enabled: []string{"statefulset", "service", "secret", "tls", "replication", "readiness"}},
		{value: "-backup,*", enabled: []string{"statefulset", "service", "secret", "tls", "replication", "cleanup", "readiness"}},
		{value: "backup,-backup", enabled: nil},
		{value: "secret,-backup", enabled: []string{"secret"}},
		{value: "*,readiness", enabled: known},
		{value: "bogus", err: `unknown controller "bogus" in --controllers: valid controllers are statefulset, service, secret, backup, tls, replication, cleanup, readiness (and * for all of them)`},
		{value: "*,-bogus", err: `unknown controller "bogus"`},
		{value: "statefulset,", err: `invalid entry "" in --controllers`},
		{value: "-", err: `invalid entry "-" in --controllers`},
		{value: "-*", err: `invalid entry "-*" in --controllers`},
		{value: "StatefulSet", err: `unknown controller "StatefulSet"`},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			set, err := ParseControllers(tt.value, known)
			if tt.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.enabled, set.Names(known))
			assert.Len(t, set, len(known), "every known controller has an entry")
		})
	}
}

func TestRegistryNames(t *testing.T) {
	assert.Equal(t, []string{"statefulset", "service", "secret", "backup", "tls", "replication", "configuration", "roles", "extensions", "cleanup", "readiness"}, Names())
	seen := map[string]bool{}
	for _, c := range All() {
		assert.False(t, seen[c.ConditionType()], "condition %s owned twice", c.ConditionType())
		seen[c.ConditionType()] = true
	}
}
