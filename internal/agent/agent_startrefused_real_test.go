package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// TestParametersThatStopAStartArePutBack: a value ALTER SYSTEM accepts but
// the server's start refuses (a library that is not there;
// superuser_reserved_connections not below max_connections) never keeps
// the server down. The agent puts back the values of the server's last
// start of the restart-only settings changed since and starts it again:
// the server runs with them, a reload-only change and dbkeeper's own
// synchronous_standby_names stay, and the next parameters request with
// the same values has them refused with the server's line, not written.
// Another value is written and applied at the next restart.
func TestParametersThatStopAStartArePutBack(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped under -short")
	}
	c := newCluster(t)
	a := c.start("db-0")
	_, err := c.client.Bootstrap(context.Background(), a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	c.waitStatus(a, 90*time.Second, "a running primary", runningAs(agentapi.RolePrimary))
	lastStarted := filepath.Join(a.dir, "dbkeeper-last-started.auto.conf")
	assert.FileExists(t, lastStarted, "the first start's file kept beside the data directory")
	maxConnections, reserved := show(t, a, "max_connections"), show(t, a, "superuser_reserved_connections")

	good := map[string]string{"work_mem": "8MB", "shared_preload_libraries": "pg_stat_statements"}
	r := c.setParameters(a, good)
	require.Empty(t, r.Refused)
	a = c.restart(a)
	c.waitStatus(a, 90*time.Second, "running with pg_stat_statements", runningAs(agentapi.RolePrimary))
	assert.Equal(t, "pg_stat_statements", show(t, a, "shared_preload_libraries"))
	b, err := os.ReadFile(lastStarted)
	require.NoError(t, err)
	assert.Contains(t, string(b), "shared_preload_libraries = 'pg_stat_statements'\n", "the last start's file")

	// dbkeeper's own setting, written after that start, is not put back.
	pa := sql(t, a)
	mustExec(t, pa, `ALTER SYSTEM SET synchronous_standby_names = '"db-1"'`)
	mustExec(t, pa, "SELECT pg_reload_conf()")

	// A library that is not in the library directory: refused before it
	// is written (missingLibrary), the server not restarted.
	r = c.setParameters(a, map[string]string{"work_mem": "16MB", "shared_preload_libraries": "pg_stat_statements,no_such_library"})
	assert.Equal(t, []string{"shared_preload_libraries"}, keys(r.Refused))
	assert.Contains(t, r.Refused["shared_preload_libraries"], `library "no_such_library" is not in this image`)
	assert.Empty(t, r.PendingRestart)
	assert.Equal(t, "pg_stat_statements", autoConf(t, a)["shared_preload_libraries"])

	// One given by path, which the agent leaves to the server: written,
	// the start refuses it.
	bad := map[string]string{"work_mem": "16MB", "shared_preload_libraries": "pg_stat_statements,$libdir/no_such_library"}
	r = c.setParameters(a, bad)
	assert.Empty(t, r.Refused)
	assert.Equal(t, []string{"shared_preload_libraries"}, r.PendingRestart)
	a = c.restart(a)
	c.waitStatus(a, 90*time.Second, "running again with the library of its last start", runningAs(agentapi.RolePrimary))
	select {
	case <-a.exited:
		t.Fatal("the agent exited")
	default:
	}
	assert.Equal(t, "pg_stat_statements", show(t, a, "shared_preload_libraries"))
	assert.Equal(t, "16MB", show(t, a, "work_mem"), "a reload applied it: it stays")
	assert.Equal(t, `"db-1"`, show(t, a, "synchronous_standby_names"))
	kept := map[string]string{"work_mem": "16MB", "shared_preload_libraries": "pg_stat_statements", "synchronous_standby_names": `"db-1"`}
	assert.Equal(t, kept, autoConf(t, a))
	log, err := os.ReadFile(a.logPath)
	require.NoError(t, err)
	assert.Equal(t, 1, countLines(string(log), "The server did not start", `"shared_preload_libraries"`, "no_such_library"), "%s", log)
	assert.Equal(t, 2, countLines(string(log), "Started the server"), "started once more by the same agent")
	b, err = os.ReadFile(filepath.Join(a.dir, "dbkeeper-refused-at-start.auto.conf"))
	require.NoError(t, err)
	assert.Contains(t, string(b), `shared_preload_libraries = 'pg_stat_statements, "$libdir/no_such_library"'`, "the failed file aside")

	// Asked again: refused with the server's line, not written.
	written := autoConfTime(t, a)
	r = c.setParameters(a, bad)
	assert.Equal(t, []string{"shared_preload_libraries"}, keys(r.Refused))
	assert.Contains(t, r.Refused["shared_preload_libraries"], `the server did not start with shared_preload_libraries = 'pg_stat_statements, "$libdir/no_such_library"': `)
	assert.Contains(t, r.Refused["shared_preload_libraries"], `FATAL:  could not access file "$libdir/no_such_library": No such file or directory`)
	assert.Empty(t, r.PendingRestart)
	assert.Equal(t, written, autoConfTime(t, a), "postgresql.auto.conf written")
	assert.Equal(t, kept, autoConf(t, a))

	// Another value is written, and applied by the next start.
	fixed := map[string]string{"work_mem": "16MB", "shared_preload_libraries": "pg_stat_statements,auto_explain"}
	r = c.setParameters(a, fixed)
	assert.Empty(t, r.Refused)
	assert.Equal(t, []string{"shared_preload_libraries"}, r.PendingRestart)
	a = c.restart(a)
	c.waitStatus(a, 90*time.Second, "running with auto_explain", runningAs(agentapi.RolePrimary))
	assert.Equal(t, "pg_stat_statements, auto_explain", show(t, a, "shared_preload_libraries"))
	log, err = os.ReadFile(a.logPath)
	require.NoError(t, err)
	assert.Zero(t, countLines(string(log), "The server did not start"), "%s", log)

	// superuser_reserved_connections not below max_connections: the
	// postmaster says so without a severity.
	pair := map[string]string{"work_mem": "16MB", "shared_preload_libraries": "pg_stat_statements,auto_explain",
		"max_connections": "20", "superuser_reserved_connections": "50"}
	r = c.setParameters(a, pair)
	assert.Empty(t, r.Refused)
	assert.Equal(t, []string{"max_connections", "superuser_reserved_connections"}, r.PendingRestart)
	a = c.restart(a)
	c.waitStatus(a, 90*time.Second, "running again with the connections of its last start", runningAs(agentapi.RolePrimary))
	assert.Equal(t, maxConnections, show(t, a, "max_connections"))
	assert.Equal(t, reserved, show(t, a, "superuser_reserved_connections"))
	r = c.setParameters(a, pair)
	assert.Equal(t, []string{"max_connections", "superuser_reserved_connections"}, keys(r.Refused))
	assert.Contains(t, r.Refused["max_connections"], "the server did not start with max_connections = '20' (together with superuser_reserved_connections = '50'): ")
	assert.Contains(t, r.Refused["superuser_reserved_connections"], "superuser_reserved_connections (50) must be less than max_connections (20)")
	assert.NotContains(t, autoConf(t, a), "max_connections")

	// Another value of one of the two: both written, applied by the next
	// start.
	pair["superuser_reserved_connections"] = "5"
	r = c.setParameters(a, pair)
	assert.Empty(t, r.Refused)
	assert.Equal(t, []string{"max_connections", "superuser_reserved_connections"}, r.PendingRestart)
	a = c.restart(a)
	c.waitStatus(a, 90*time.Second, "running with 20 connections", runningAs(agentapi.RolePrimary))
	assert.Equal(t, "20", show(t, a, "max_connections"))
	assert.Equal(t, "5", show(t, a, "superuser_reserved_connections"))
	assert.Equal(t, `"db-1"`, show(t, a, "synchronous_standby_names"), "dbkeeper's own setting through it all")
}
