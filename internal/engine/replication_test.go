package engine_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/engine"
)

// TestHostBasedAuthLetsStandbysStream: with TLS on, the replication role
// may open a replication connection over TLS with its password (no "all"
// line matches the replication pseudo-database), before the line that
// rejects everything else; no other role may, and plaintext never.
func TestHostBasedAuthLetsStandbysStream(t *testing.T) {
	var rules [][]string
	for _, line := range strings.Split(engine.Postgres{}.HostBasedAuth(), "\n") {
		if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(f[0], "#") {
			rules = append(rules, f)
		}
	}
	repl, reject := -1, -1
	for i, f := range rules {
		switch {
		case f[1] == "replication":
			assert.Equal(t, []string{"hostssl", "replication", agentapi.ReplicationUser, "all", "scram-sha-256"}, f)
			repl = i
		case f[0] == "host" && f[len(f)-1] == "reject":
			reject = i
		}
	}
	require.NotEqual(t, -1, repl, "no replication rule")
	require.NotEqual(t, -1, reject, "no reject rule")
	assert.Less(t, repl, reject, "the reject rule would win")
}
