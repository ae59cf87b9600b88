package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// setParameters sends in's agent params and returns its answer.
func (c *cluster) setParameters(in *instance, params map[string]string) agentapi.ParametersResponse {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := c.client.Parameters(ctx, in.url, agentapi.ParametersRequest{Parameters: params})
	require.NoError(c.t, err)
	c.t.Logf("%s: parameters %v: %+v", in.name, params, r)
	return r
}

// autoConf is what in's postgresql.auto.conf holds now, by name.
func autoConf(t *testing.T, in *instance) map[string]string {
	t.Helper()
	rows, err := sql(t, in).Query(context.Background(), `SELECT name, setting FROM pg_file_settings
		WHERE sourcefile = current_setting('data_directory') || '/postgresql.auto.conf'`)
	require.NoError(t, err)
	m := map[string]string{}
	var name, setting string
	_, err = pgx.ForEachRow(rows, []any{&name, &setting}, func() error { m[name] = setting; return nil })
	require.NoError(t, err)
	return m
}

// show is a setting as a new session of in's server sees it.
func show(t *testing.T, in *instance, name string) string {
	t.Helper()
	return stringQuery(t, sql(t, in), "SELECT current_setting($1)", name)
}

// autoConfTime is when in's postgresql.auto.conf was last written.
func autoConfTime(t *testing.T, in *instance) time.Time {
	t.Helper()
	fi, err := os.Stat(filepath.Join(in.pgdata, "postgresql.auto.conf"))
	require.NoError(t, err)
	return fi.ModTime()
}

// restart stops in's agent (and so its server) and starts a new agent on
// its data directory, with env added to its environment.
func (c *cluster) restart(in *instance, env ...string) *instance {
	c.t.Helper()
	require.NoError(c.t, in.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-in.exited:
	case <-time.After(60 * time.Second):
		c.t.Fatalf("%s: the agent did not exit within 60s of SIGTERM", in.name)
	}
	return c.start(in.name, env...)
}

// TestParametersReachPostgreSQL: the agent makes postgresql.auto.conf
// hold a Database's parameters with ALTER SYSTEM, on a primary and on a
// standby. work_mem is applied by a reload (no restart); a value or a name
// PostgreSQL refuses is answered with its message and left as it was,
// the rest of the request applied; shared_buffers and
// shared_preload_libraries (a list: one constant per library) are written
// and reported as needing a restart until one; a parameter no longer
// asked for is reset, a manual ALTER SYSTEM with it, and
// synchronous_standby_names (dbkeeper's own) is left alone. A standby
// whose configuration says less max_connections than its primary's
// pg_control starts with the primary's value (PostgreSQL refuses to start
// it with less), and is not pending a restart for it until the primary
// lowered its own; then a restart gives it its own value.
func TestParametersReachPostgreSQL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped under -short")
	}
	c := newCluster(t)
	ctx := context.Background()
	a := c.start("db-0")
	b := c.start("db-1")

	// No server yet: refused as the other requests are.
	_, err := c.client.Parameters(ctx, a.url, agentapi.ParametersRequest{Parameters: map[string]string{"work_mem": "8MB"}})
	assert.Equal(t, http.StatusConflict, agentCode(err), "parameters without a server: %v", err)
	_, err = agentapi.Client{Token: "wrong"}.Parameters(ctx, a.url, agentapi.ParametersRequest{})
	assert.Equal(t, http.StatusUnauthorized, agentCode(err), "parameters without the token: %v", err)

	_, err = c.client.Bootstrap(ctx, a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	c.waitStatus(a, 90*time.Second, "a running primary", runningAs(agentapi.RolePrimary))
	pa := sql(t, a)
	mustExec(t, pa, fmt.Sprintf("CREATE ROLE %s WITH LOGIN REPLICATION PASSWORD '%s'", agentapi.ReplicationUser, strings.ReplaceAll(replPassword, "'", "''")))
	mustExec(t, pa, "SELECT pg_create_physical_replication_slot($1)", agentapi.SlotName(b.name))
	c.proxy.target.Store(int32(a.port))
	_, err = c.client.Bootstrap(ctx, b.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapClone})
	require.NoError(t, err)
	streaming := func(s agentapi.Status) bool {
		return runningAs(agentapi.RoleReplica)(s) && s.WALReceiver == "streaming"
	}
	c.waitStatus(b, 90*time.Second, "a streaming standby", streaming)

	// work_mem: a reload, no restart.
	startTime := stringQuery(t, pa, "SELECT pg_postmaster_start_time()::text")
	pid := postmasterPID(a.pgdata)
	// search_path: a list, one constant per element (one constant would
	// be one schema named `"$user", public, Sales`)
	first := map[string]string{"work_mem": "8MB", "search_path": `"$user",public, Sales`}
	r := c.setParameters(a, first)
	assert.Empty(t, r.Refused)
	assert.Empty(t, r.RestartOnly)
	assert.Empty(t, r.PendingRestart)
	assert.Equal(t, "8MB", show(t, a, "work_mem"), "a new session's work_mem")
	assert.Equal(t, `"$user", public, sales`, show(t, a, "search_path"))
	assert.Equal(t, "8MB", autoConf(t, a)["work_mem"])
	written := autoConfTime(t, a)
	r = c.setParameters(a, first)
	assert.Empty(t, r.Refused)
	assert.Equal(t, written, autoConfTime(t, a), "the same request wrote postgresql.auto.conf again")
	assert.Equal(t, startTime, stringQuery(t, pa, "SELECT pg_postmaster_start_time()::text"), "the server restarted")
	assert.Equal(t, pid, postmasterPID(a.pgdata))

	// Refusals: PostgreSQL's message, the parameter left as it was, the
	// rest applied, the server running on.
	r = c.setParameters(a, map[string]string{"work_mem": "1XB", "no_such_parameter": "on", "maintenance_work_mem": "100MB"})
	assert.Len(t, r.Refused, 2, "%v", r.Refused)
	assert.Contains(t, r.Refused["work_mem"], `invalid value for parameter "work_mem": "1XB"`)
	assert.Contains(t, r.Refused["work_mem"], `(HINT: Valid units for this parameter are`, "the hint")
	assert.Contains(t, r.Refused["no_such_parameter"], `unrecognized configuration parameter "no_such_parameter"`)
	assert.Empty(t, r.RestartOnly, "an unknown name is not restart-only")
	assert.Equal(t, "100MB", show(t, a, "maintenance_work_mem"), "the parameter PostgreSQL accepted")
	assert.Equal(t, "8MB", show(t, a, "work_mem"), "the refused value replaced the one before")
	assert.Equal(t, "8MB", autoConf(t, a)["work_mem"])
	assert.NotContains(t, autoConf(t, a), "no_such_parameter")
	assert.NotContains(t, autoConf(t, a), "search_path", "reset: no longer asked for")
	assert.Equal(t, pid, postmasterPID(a.pgdata))
	c.waitStatus(a, 10*time.Second, "running", runningAs(agentapi.RolePrimary))

	// Restart-only parameters: written, reported until a restart, applied
	// by it.
	libraries := "pg_stat_statements,auto_explain"
	want := map[string]string{"work_mem": "8MB", "shared_buffers": "256MB", "shared_preload_libraries": libraries}
	r = c.setParameters(a, want)
	assert.Empty(t, r.Refused)
	assert.Equal(t, []string{"shared_buffers", "shared_preload_libraries"}, r.RestartOnly)
	assert.Equal(t, []string{"shared_buffers", "shared_preload_libraries"}, r.PendingRestart)
	conf := autoConf(t, a)
	assert.Equal(t, "256MB", conf["shared_buffers"])
	assert.Equal(t, "pg_stat_statements, auto_explain", conf["shared_preload_libraries"], "two libraries, not one named %q", libraries)
	assert.NotContains(t, conf, "maintenance_work_mem", "reset: no longer asked for")
	assert.Equal(t, "128MB", show(t, a, "shared_buffers"))
	log, err := os.ReadFile(a.logPath)
	require.NoError(t, err)
	assert.Equal(t, 1, countLines(string(log), "Set a PostgreSQL parameter", `"work_mem"`), "work_mem set more than once:\n%s", log)
	assert.Equal(t, 1, countLines(string(log), "Reset a PostgreSQL parameter", `"maintenance_work_mem"`))
	assert.Equal(t, 1, countLines(string(log), "Refused a PostgreSQL parameter", `"no_such_parameter"`))

	a = c.restart(a)
	c.waitStatus(a, 90*time.Second, "running as the primary again", runningAs(agentapi.RolePrimary))
	c.proxy.target.Store(int32(a.port))
	pa = sql(t, a)
	assert.Equal(t, "256MB", show(t, a, "shared_buffers"))
	assert.Equal(t, "pg_stat_statements, auto_explain", show(t, a, "shared_preload_libraries"))
	written = autoConfTime(t, a)
	r = c.setParameters(a, want)
	assert.Empty(t, r.Refused)
	assert.Equal(t, []string{"shared_buffers", "shared_preload_libraries"}, r.RestartOnly)
	assert.Empty(t, r.PendingRestart, "after the restart")
	assert.Equal(t, written, autoConfTime(t, a), "the list written again")
	// a custom parameter, its name in two parts
	r = c.setParameters(a, map[string]string{"work_mem": "8MB", "shared_buffers": "256MB", "shared_preload_libraries": libraries,
		"pg_stat_statements.max": "6000"})
	assert.Empty(t, r.Refused)
	assert.Equal(t, []string{"pg_stat_statements.max", "shared_buffers", "shared_preload_libraries"}, r.RestartOnly)
	assert.Equal(t, []string{"pg_stat_statements.max"}, r.PendingRestart)
	assert.Equal(t, "6000", autoConf(t, a)["pg_stat_statements.max"])

	// A parameter left out is reset, a manual ALTER SYSTEM too; dbkeeper's
	// own synchronous_standby_names stays.
	mustExec(t, pa, `ALTER SYSTEM SET synchronous_standby_names = '"db-1"'`)
	mustExec(t, pa, "ALTER SYSTEM SET log_min_duration_statement = '1s'")
	mustExec(t, pa, "SELECT pg_reload_conf()")
	r = c.setParameters(a, map[string]string{"shared_buffers": "256MB", "shared_preload_libraries": libraries})
	assert.Empty(t, r.Refused)
	assert.Empty(t, r.PendingRestart, "pg_stat_statements.max, never applied, was reset")
	assert.Equal(t, map[string]string{"shared_buffers": "256MB", "shared_preload_libraries": "pg_stat_statements, auto_explain",
		"synchronous_standby_names": `"db-1"`}, autoConf(t, a))
	assert.Equal(t, "4MB", show(t, a, "work_mem"), "work_mem back to its default")
	assert.Equal(t, "-1", show(t, a, "log_min_duration_statement"))
	assert.Equal(t, `"db-1"`, show(t, a, "synchronous_standby_names"))
	mustExec(t, pa, "ALTER SYSTEM RESET synchronous_standby_names")
	mustExec(t, pa, "SELECT pg_reload_conf()")

	// Nothing asked: every parameter reset; a restart would change
	// shared_buffers (postgresql.conf's 128MB) and shared_preload_libraries
	// (in no file now).
	r = c.setParameters(a, nil)
	assert.Empty(t, r.Refused)
	assert.Empty(t, r.RestartOnly)
	assert.Equal(t, []string{"shared_buffers", "shared_preload_libraries"}, r.PendingRestart)
	assert.Empty(t, autoConf(t, a))

	// The same on the standby, in recovery.
	c.waitStatus(b, 60*time.Second, "streaming from the restarted primary", streaming)
	pid = postmasterPID(b.pgdata)
	primaryMax := show(t, a, "max_connections")
	standbyWant := map[string]string{"work_mem": "8MB", "shared_buffers": "256MB", "no_such_parameter": "on", "max_connections": "50"}
	r = c.setParameters(b, standbyWant)
	assert.Equal(t, []string{"no_such_parameter"}, keys(r.Refused))
	assert.Contains(t, r.Refused["no_such_parameter"], `unrecognized configuration parameter "no_such_parameter"`)
	assert.Equal(t, []string{"max_connections", "shared_buffers"}, r.RestartOnly)
	assert.Equal(t, []string{"max_connections", "shared_buffers"}, r.PendingRestart)
	assert.Equal(t, "8MB", show(t, b, "work_mem"))
	assert.Equal(t, map[string]string{"work_mem": "8MB", "shared_buffers": "256MB", "max_connections": "50"}, autoConf(t, b))
	assert.Equal(t, pid, postmasterPID(b.pgdata))
	c.waitStatus(b, 10*time.Second, "streaming", streaming)

	// Its postgresql.auto.conf says max_connections 50, its primary's
	// pg_control 100: it starts with the primary's value.
	b = c.restart(b)
	c.waitStatus(b, 90*time.Second, "streaming again with less max_connections configured than the primary", streaming)
	assert.Equal(t, primaryMax, show(t, b, "max_connections"), "the primary's max_connections")
	assert.Equal(t, "command line", stringQuery(t, sql(t, b), "SELECT source FROM pg_settings WHERE name = 'max_connections'"))
	assert.Equal(t, "256MB", show(t, b, "shared_buffers"))
	log, err = os.ReadFile(b.logPath)
	require.NoError(t, err)
	assert.Equal(t, 1, countLines(string(log), "Raising a setting of this standby to its primary's", `"max_connections"`), "%s", log)
	assert.Equal(t, 1, countLines(string(log), "Raising a setting of this standby"), "only max_connections is lower than the primary's")
	assert.Zero(t, countLines(string(log), "Cannot"), "the standby could not read a setting")
	r = c.setParameters(b, standbyWant)
	assert.Empty(t, r.PendingRestart, "a restart would not apply the configured max_connections either")
	mustExec(t, pa, "CREATE TABLE t AS SELECT 1 AS id")
	pb := sql(t, b)
	waitFor(t, func() bool {
		return count(t, pb, "SELECT count(*) FROM pg_class WHERE relname = 't'") == 1
	}, 20*time.Second, "a table made on the primary visible on the standby")

	// The primary lowers max_connections too and restarts: the standby
	// replays the change into its pg_control, and a restart now gives it
	// its own value.
	r = c.setParameters(a, map[string]string{"max_connections": "50"})
	assert.Equal(t, []string{"max_connections"}, r.RestartOnly)
	a = c.restart(a)
	c.waitStatus(a, 90*time.Second, "running as the primary again", runningAs(agentapi.RolePrimary))
	c.proxy.target.Store(int32(a.port))
	pa = sql(t, a)
	assert.Equal(t, "50", show(t, a, "max_connections"))
	mustExec(t, pa, "INSERT INTO t VALUES (2)")
	waitFor(t, func() bool { return count(t, sql(t, b), "SELECT count(*) FROM t") == 2 }, 30*time.Second,
		"the standby replayed past the primary's start")
	r = c.setParameters(b, standbyWant)
	assert.Equal(t, []string{"max_connections"}, r.PendingRestart, "the standby runs with 100, a start would give it 50")
	b = c.restart(b)
	c.waitStatus(b, 90*time.Second, "streaming again", streaming)
	assert.Equal(t, "50", show(t, b, "max_connections"))
	log, err = os.ReadFile(b.logPath)
	require.NoError(t, err)
	assert.Zero(t, countLines(string(log), "Raising a setting of this standby"), "%s", log)
	r = c.setParameters(b, standbyWant)
	assert.Empty(t, r.PendingRestart)
}

// countLines counts the lines of log that hold every one of words.
func countLines(log string, words ...string) int {
	n := 0
	for _, l := range strings.Split(log, "\n") {
		all := true
		for _, w := range words {
			all = all && strings.Contains(l, w)
		}
		if all {
			n++
		}
	}
	return n
}

// keys are m's keys, sorted.
func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
