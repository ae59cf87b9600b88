package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// serverLine is a JSON line of the server's output in an agent's log.
type serverLine struct {
	Level     string         `json:"level"`
	TS        string         `json:"ts"`
	Logger    string         `json:"logger"`
	Msg       string         `json:"msg"`
	Namespace string         `json:"namespace"`
	Database  string         `json:"database"`
	Pod       string         `json:"pod"`
	Record    map[string]any `json:"record"`
	Line      string         `json:"line"`
}

// serverLines are the JSON lines of the server's output in log (an
// agent's stdout and stderr), in order.
func serverLines(log string) []serverLine {
	var out []serverLine
	for _, l := range strings.Split(log, "\n") {
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var s serverLine
		if json.Unmarshal([]byte(l), &s) == nil && s.Logger == "postgres" {
			out = append(out, s)
		}
	}
	return out
}

// serverLogText is log with the server's JSON lines as the server would
// have written them as text (log_time [pid] SEVERITY:  message), for the
// tests that read its messages.
func serverLogText(log string) string {
	var b strings.Builder
	for _, l := range strings.Split(log, "\n") {
		var s serverLine
		if !strings.HasPrefix(l, "{") || json.Unmarshal([]byte(l), &s) != nil || s.Logger != "postgres" {
			b.WriteString(l + "\n")
			continue
		}
		if s.Msg != "record" {
			b.WriteString(s.Line + "\n")
			continue
		}
		pid, _ := s.Record["pid"].(float64)
		ts, _ := s.Record["timestamp"].(string)
		sev, _ := s.Record["error_severity"].(string)
		msg, _ := s.Record["message"].(string)
		b.WriteString(ts + " [" + strconv.Itoa(int(pid)) + "] " + sev + ":  " + msg + "\n")
	}
	return b.String()
}

// serverMajor is the major version of the tests' PostgreSQL.
func serverMajor(t *testing.T, c *cluster) int {
	out, err := exec.Command(filepath.Join(c.pgBin, "postgres"), "--version").Output()
	require.NoError(t, err)
	m := regexp.MustCompile(`\(PostgreSQL\) (\d+)`).FindSubmatch(out)
	require.NotNil(t, m, "%s", out)
	major, _ := strconv.Atoi(string(m[1]))
	return major
}

// records are the server's jsonlog records in in's log that match.
func records(t *testing.T, in *instance, match func(serverLine) bool) []serverLine {
	t.Helper()
	b, err := os.ReadFile(in.logPath)
	require.NoError(t, err)
	var out []serverLine
	for _, s := range serverLines(string(b)) {
		if s.Msg == "record" && match(s) {
			out = append(out, s)
		}
	}
	return out
}

// message matches a record whose severity is sev and whose message holds
// text.
func message(sev, text string) func(serverLine) bool {
	return func(s serverLine) bool {
		m, _ := s.Record["message"].(string)
		return s.Record["error_severity"] == sev && strings.Contains(m, text)
	}
}

// loggerPID is the pid of the logging collector of the postmaster pm, 0
// when it has none.
func loggerPID(t *testing.T, pm int) int {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*")
	require.NoError(t, err)
	for _, d := range dirs {
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		cmdline, _ := os.ReadFile(filepath.Join(d, "cmdline"))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pm) && strings.Contains(string(cmdline), "logger") {
			pid, _ := strconv.Atoi(filepath.Base(d))
			return pid
		}
	}
	return 0
}

// TestServerLogsJSON (issue 32): PostgreSQL 15 and later log jsonlog
// through the agent: every record reaches the agent's stdout as one JSON
// line naming the namespace, the Database and the pod, with PostgreSQL's
// record as it is (a failing statement's ERROR, the FATAL of a terminated
// session); nothing is written under the data directory; the records keep
// coming after a pg_rotate_logfile() and after the collector was killed
// and restarted by the postmaster (which opens the pipe again); the
// server's last records (its shutdown) reach the log before the agent
// exits; and the lines the server wrote before its collector started are
// JSON lines too.
func TestServerLogsJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped under -short")
	}
	c := newCluster(t)
	if serverMajor(t, c) < 15 {
		t.Skip("jsonlog needs PostgreSQL 15")
	}
	ctx := context.Background()
	a := c.start("db-0", agentapi.EnvNamespace+"=shop")
	_, err := c.client.Bootstrap(ctx, a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	c.waitStatus(a, 90*time.Second, "a running primary", runningAs(agentapi.RolePrimary))
	pa := sql(t, a)

	failing := func(table string) {
		_, err := pa.Exec(ctx, "SELECT * FROM "+table)
		require.Error(t, err)
	}
	wantError := func(table string) serverLine {
		t.Helper()
		var got []serverLine
		require.Eventually(t, func() bool {
			got = records(t, a, message("ERROR", `relation "`+table+`" does not exist`))
			return len(got) == 1
		}, 10*time.Second, 50*time.Millisecond, "the ERROR of SELECT * FROM %s in the agent's log", table)
		return got[0]
	}
	failing("no_such_table")
	e := wantError("no_such_table")
	assert.Equal(t, "error", e.Level)
	assert.Equal(t, "shop", e.Namespace)
	assert.Equal(t, "db", e.Database)
	assert.Equal(t, "db-0", e.Pod)
	_, err = time.Parse("2006-01-02T15:04:05.000Z0700", e.TS)
	assert.NoError(t, err)
	assert.Equal(t, "SELECT * FROM no_such_table", e.Record["statement"], "PostgreSQL's own fields")
	assert.Equal(t, "42P01", e.Record["state_code"])
	assert.Equal(t, "postgres", e.Record["dbname"])
	assert.Equal(t, "client backend", e.Record["backend_type"])

	// a session terminated by another
	victim := sql(t, a)
	var victimPID int
	require.NoError(t, victim.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&victimPID))
	mustExec(t, pa, "SELECT pg_terminate_backend($1)", victimPID)
	require.Eventually(t, func() bool {
		got := records(t, a, message("FATAL", "terminating connection due to administrator command"))
		return len(got) == 1 && got[0].Record["pid"] == float64(victimPID) && got[0].Level == "error"
	}, 10*time.Second, 50*time.Millisecond, "the terminated session's FATAL")

	// no log file under the data directory, pipes only where it logs
	_, err = os.Stat(filepath.Join(a.pgdata, "log"))
	assert.True(t, os.IsNotExist(err), "a log directory in PGDATA: %v", err)
	logDir := stringQuery(t, pa, "SELECT current_setting('log_directory')")
	assert.Equal(t, filepath.Join(a.dir, "tmp", "dbkeeper-pglog"), logDir)
	entries, err := os.ReadDir(logDir)
	require.NoError(t, err)
	for _, e := range entries {
		assert.Equal(t, os.ModeNamedPipe, e.Type(), "%s is a pipe", e.Name())
	}
	assert.Len(t, entries, 2)

	// a rotation asked for by SQL
	mustExec(t, pa, "SELECT pg_rotate_logfile()")
	failing("after_rotation")
	wantError("after_rotation")

	// the collector killed: the postmaster starts another, which opens
	// the pipes again
	pm := postmasterPID(a.pgdata)
	logger := loggerPID(t, pm)
	require.Positive(t, logger, "the collector of the postmaster %d", pm)
	require.NoError(t, syscall.Kill(logger, syscall.SIGKILL))
	require.Eventually(t, func() bool {
		next := loggerPID(t, pm)
		return next != 0 && next != logger
	}, 10*time.Second, 50*time.Millisecond, "a new collector")
	failing("after_collector_restart")
	wantError("after_collector_restart")
	assert.Equal(t, pm, postmasterPID(a.pgdata), "the same server")
	assert.Equal(t, agentapi.StateRunning, c.status(a).State)

	// the last records of a stop
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-a.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("the agent did not stop")
	}
	assert.Len(t, records(t, a, message("LOG", "database system is shut down")), 1, "the server's last record")

	// what came before the collector: the entrypoint's and the
	// postmaster's first lines
	b, err := os.ReadFile(a.logPath)
	require.NoError(t, err)
	var early []string
	for _, s := range serverLines(string(b)) {
		assert.Equal(t, "db-0", s.Pod)
		if s.Msg == "stdout" || s.Msg == "stderr" {
			early = append(early, s.Line)
		}
	}
	assert.Contains(t, strings.Join(early, "\n"), "redirecting log output to logging collector process")
	assert.Contains(t, strings.Join(early, "\n"), "PostgreSQL init process complete")
	for _, l := range strings.Split(string(b), "\n") {
		assert.NotRegexp(t, `^\d{4}-\d\d-\d\d \S+ \S+ \[\d+\] (LOG|ERROR|FATAL):  `, l, "a text line of the server's log")
	}
}

// TestServerFailureReachesTheMessage: a server that fails after its
// collector started (here its startup process finds no checkpoint record:
// the WAL is gone) logs its PANIC as a record; the agent still reads it
// from its tail and exits with it as its reason (its error, which becomes
// the pod's termination message, and its last log line).
func TestServerFailureReachesTheMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped under -short")
	}
	c := newCluster(t)
	if serverMajor(t, c) < 15 {
		t.Skip("jsonlog needs PostgreSQL 15")
	}
	ctx := context.Background()
	a := c.start("db-0")
	_, err := c.client.Bootstrap(ctx, a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	c.waitStatus(a, 90*time.Second, "a running primary", runningAs(agentapi.RolePrimary))
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	<-a.exited
	segments, err := filepath.Glob(filepath.Join(a.pgdata, "pg_wal", "[0-9A-F]*"))
	require.NoError(t, err)
	require.NotEmpty(t, segments)
	for _, s := range segments {
		require.NoError(t, os.Remove(s))
	}

	a = c.start("db-0")
	select {
	case <-a.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("the agent did not exit after its server")
	}
	assert.False(t, a.cmd.ProcessState.Success())
	require.NotEmpty(t, records(t, a, message("PANIC", "could not locate a valid checkpoint record")), "the PANIC came as a record")
	b, err := os.ReadFile(a.logPath)
	require.NoError(t, err)
	assert.Equal(t, 1, countLines(string(b), "The agent exits", "the server exited: exit status 1: PANIC: could not locate a valid checkpoint record"), "%s", b)
	assert.Contains(t, string(b), "error: agent: the server exited: exit status 1: PANIC: could not locate a valid checkpoint record")
}
