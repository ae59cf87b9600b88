package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A parameter's name is quoted part by part (a custom parameter has a
// dot), its value as a constant that means the same whatever
// standard_conforming_strings says.
func TestParameterQuoting(t *testing.T) {
	assert.Equal(t, `"work_mem"`, quoteName("work_mem"))
	assert.Equal(t, `"pg_stat_statements"."max"`, quoteName("pg_stat_statements.max"))
	assert.Equal(t, `"a""b"."c d"`, quoteName(`a"b.c d`))
	assert.Equal(t, `'8MB'`, quoteLiteral("8MB"))
	assert.Equal(t, `''`, quoteLiteral(""))
	assert.Equal(t, `'it''s'`, quoteLiteral("it's"))
	assert.Equal(t, `E'C:\\dir'`, quoteLiteral(`C:\dir`))
	assert.Equal(t, `E'\\'''`, quoteLiteral(`\'`))

	stmt, err := alterSystemSet("work_mem", "8MB")
	require.NoError(t, err)
	assert.Equal(t, `ALTER SYSTEM SET "work_mem" = '8MB'`, stmt)
	stmt, err = alterSystemSet("pg_stat_statements.max", "5000")
	require.NoError(t, err)
	assert.Equal(t, `ALTER SYSTEM SET "pg_stat_statements"."max" = '5000'`, stmt)
	stmt, err = alterSystemSet("log_line_prefix", "%m [%p] ")
	require.NoError(t, err)
	assert.Equal(t, `ALTER SYSTEM SET "log_line_prefix" = '%m [%p] '`, stmt, "a non-list value is one constant, commas and blanks kept")
	stmt, err = alterSystemSet("application_name", "a,b")
	require.NoError(t, err)
	assert.Equal(t, `ALTER SYSTEM SET "application_name" = 'a,b'`, stmt)
	assert.Equal(t, `ALTER SYSTEM RESET "pg_stat_statements"."max"`, alterSystemReset("pg_stat_statements.max"))

	_, err = alterSystemSet("work_mem", "8MB\x00")
	assert.ErrorContains(t, err, "NUL")
	_, err = alterSystemSet("work\x00mem", "8MB")
	assert.ErrorContains(t, err, "NUL")
}

// A list parameter whose values ALTER SYSTEM quotes as identifiers gets
// one constant per element: 'pg_stat_statements,auto_explain' as one
// constant would be one library of that name.
func TestListParametersAreSetElementByElement(t *testing.T) {
	for _, c := range []struct{ name, value, want string }{
		{"shared_preload_libraries", "pg_stat_statements,auto_explain", `'pg_stat_statements', 'auto_explain'`},
		{"shared_preload_libraries", " pg_stat_statements , auto_explain ", `'pg_stat_statements', 'auto_explain'`},
		{"Shared_Preload_Libraries", "pg_stat_statements", `'pg_stat_statements'`},
		{"shared_preload_libraries", "$libdir/My Lib", `'$libdir/My Lib'`},
		{"session_preload_libraries", `"a,b", c`, `'a,b', 'c'`},
		{"search_path", `"$user", public`, `'$user', 'public'`},
		{"search_path", `Sales, "Sales"`, `'sales', 'Sales'`},
		{"temp_tablespaces", `"it's"`, `'it''s'`},
		{"unix_socket_directories", "/run/a, /tmp", `'/run/a', '/tmp'`},
	} {
		stmt, err := alterSystemSet(c.name, c.value)
		require.NoError(t, err, "%s = %s", c.name, c.value)
		assert.Equal(t, "ALTER SYSTEM SET "+quoteName(c.name)+" = "+c.want, stmt, "%s = %s", c.name, c.value)
	}
	for _, value := range []string{"", "  ", `"a`, "a,", ",a", "a,,b", `"a" b`} {
		_, err := alterSystemSet("shared_preload_libraries", value)
		assert.Error(t, err, "%q", value)
	}
	_, err := alterSystemSet("search_path", "a b")
	assert.ErrorContains(t, err, `invalid list syntax in parameter "search_path"`, "a name ends at a blank")
}

// The server splits a list as SplitIdentifierString (names) and
// SplitDirectoriesString (files) do.
func TestSplitList(t *testing.T) {
	for _, c := range []struct {
		value string
		names bool
		want  []string
	}{
		{"", true, []string{}},
		{" ", false, []string{}},
		{"a", true, []string{"a"}},
		{"A,b", true, []string{"a", "b"}},
		{"A,b", false, []string{"A", "b"}},
		{` "A" ,	b `, true, []string{"A", "b"}},
		{`"a""b",c`, true, []string{`a"b`, "c"}},
		{`""`, true, []string{""}},
		{"my lib, x", false, []string{"my lib", "x"}},
		{`"a, b"`, false, []string{"a, b"}},
	} {
		got, ok := splitList(c.value, c.names)
		if assert.True(t, ok, "%q", c.value) {
			assert.Equal(t, c.want, got, "%q", c.value)
		}
	}
	for _, c := range []struct {
		value string
		names bool
	}{{"my lib", true}, {`"a`, true}, {"a,", true}, {",a", false}, {"a,,b", false}, {`"a"b`, true}, {`"a" "b"`, false}} {
		_, ok := splitList(c.value, c.names)
		assert.False(t, ok, "%q", c.value)
	}
}

// What ALTER SYSTEM wrote for a list is the same value as the request's
// when the elements are the same: nothing is written again.
func TestSameValue(t *testing.T) {
	assert.True(t, sameValue("work_mem", "8MB", "8MB"))
	assert.False(t, sameValue("work_mem", "8MB", "8192kB"), "the text counts, not what it means")
	assert.False(t, sameValue("application_name", "a, b", "a,b"))
	assert.True(t, sameValue("shared_preload_libraries", "pg_stat_statements, auto_explain", "pg_stat_statements,auto_explain"))
	assert.False(t, sameValue("shared_preload_libraries", "auto_explain, pg_stat_statements", "pg_stat_statements,auto_explain"))
	assert.True(t, sameValue("search_path", `"$user", public`, `"$user",PUBLIC`))
	assert.False(t, sameValue("search_path", `"Public"`, "Public"))
	assert.False(t, sameValue("search_path", `"a`, `"a`+" "), "an unparsable list is never the same")
}

// A standby's setting lower than its primary's in pg_control is raised to
// it; an equal or higher one, or one that cannot be read, is left alone.
func TestStandbyFloors(t *testing.T) {
	control := map[string]string{
		"max_connections setting":      "100",
		"max_worker_processes setting": "8",
		"max_wal_senders setting":      "10",
		"max_prepared_xacts setting":   "5",
		"max_locks_per_xact setting":   "64",
	}
	raise, unread := standbyFloors(map[string]string{
		"max_connections": "50", "max_worker_processes": "8", "max_wal_senders": "20",
		"max_prepared_transactions": "0", "max_locks_per_transaction": " 32\n",
	}, control)
	assert.Equal(t, []standbyFloor{
		{name: "max_connections", configured: 50, primary: 100},
		{name: "max_prepared_transactions", configured: 0, primary: 5},
		{name: "max_locks_per_transaction", configured: 32, primary: 64},
	}, raise)
	assert.Empty(t, unread)

	raise, unread = standbyFloors(map[string]string{"max_connections": "50", "max_worker_processes": "x", "max_wal_senders": "1"},
		map[string]string{"max_connections setting": "100", "max_worker_processes setting": "8"})
	assert.Equal(t, []standbyFloor{{name: "max_connections", configured: 50, primary: 100}}, raise)
	assert.Equal(t, []string{"max_worker_processes", "max_wal_senders", "max_prepared_transactions", "max_locks_per_transaction"}, unread)
}

// A standby's server command raises the settings its configuration sets
// lower than pg_control, as the server computes them with the command's
// own settings; a primary's is not looked at.
func TestStandbyArgsRaiseTheFloor(t *testing.T) {
	bin := t.TempDir()
	calls := filepath.Join(bin, "calls")
	writeScript := func(name, body string) {
		require.NoError(t, os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body), 0o755))
	}
	writeScript("pg_controldata", `echo "$0 $*" >>`+calls+`
cat <<'END'
pg_control version number:            1300
max_connections setting:              100
max_worker_processes setting:         8
max_wal_senders setting:              10
max_prepared_xacts setting:           0
max_locks_per_xact setting:           64
END
`)
	writeScript("postgres", `echo "$0 $*" >>`+calls+`
case "$2" in
max_connections) echo "2026-01-01 LOG:  noise before the value" >&2; echo 50 ;;
max_worker_processes) echo 8 ;;
max_wal_senders) exit 1 ;;
max_prepared_transactions) echo 0 ;;
max_locks_per_transaction) echo 32 ;;
esac
`)
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, versionFile), []byte("15\n"), 0o600))
	require.NoError(t, writeStandbySignal(dir))
	a := &Agent{ctx: context.Background(), log: logr.Discard(), reaper: newReaper(), pgpass: "/tmp/p",
		cfg: Config{PGData: dir, Port: 5432, SocketDir: "/run", PrimaryPort: 5432, Pod: "db-1", PrimaryHost: "db",
			Command: []string{"docker-entrypoint.sh", "postgres", "-c", "max_slot_wal_keep_size=1MB", "-c", "max_connections=50"}}}
	args := strings.Join(a.serverArgs(), " ")
	assert.True(t, strings.HasSuffix(args, " -c max_connections=100 -c max_locks_per_transaction=64"), args)
	b, err := os.ReadFile(calls)
	require.NoError(t, err)
	assert.Contains(t, string(b), "postgres -C max_connections -D "+dir+" -c max_slot_wal_keep_size=1MB -c max_connections=50\n",
		"the server computes the value with the command's settings")
	assert.Equal(t, 1, strings.Count(string(b), "pg_controldata"))

	require.NoError(t, os.Remove(calls))
	require.NoError(t, os.Remove(filepath.Join(dir, standbyFile)))
	args = strings.Join(a.serverArgs(), " ")
	assert.NotContains(t, args, "max_connections=100", "a primary")
	_, err = os.Stat(calls)
	assert.ErrorIs(t, err, os.ErrNotExist, "a primary's start ran the tools")
}

// A setting is pending a restart when a restart would change it: a value
// the files hold that the server could not apply, or a value no file
// holds any more; not one the command line sets (the image's command or
// the agent), unless the agent raised a standby's setting to its
// primary's and a start now would give it another value.
func TestPendingRestart(t *testing.T) {
	commandSets := func(name string) bool { return name == "wal_log_hints" }
	control := map[string]string{"max_connections setting": "100", "max_locks_per_xact setting": "64"}
	rows := []pendingRow{
		{name: "shared_buffers", inFile: true, file: "256MB", source: "configuration file", running: "16384"},
		{name: "shared_preload_libraries", source: "configuration file", running: "pg_stat_statements"},
		{name: "shared_buffers", inFile: true, file: "128MB", source: "configuration file", running: "16384"},
		{name: "wal_log_hints", inFile: true, file: "off", source: "command line", running: "on"},
		{name: "port", inFile: true, file: "5433", source: "command line", running: "5432"},
		// raised from 50 to the primary's 100, which pg_control still says
		{name: "max_connections", inFile: true, file: "50", source: "command line", running: "100"},
	}
	assert.Equal(t, []string{"shared_buffers", "shared_preload_libraries"}, pendingRestart(rows, true, commandSets, control))
	assert.Equal(t, []string{"max_connections", "shared_buffers", "shared_preload_libraries"}, pendingRestart(rows, false, commandSets, control),
		"a promoted standby starts with its files' value")
	lowered := map[string]string{"max_connections setting": "50"}
	assert.Contains(t, pendingRestart(rows, true, commandSets, lowered), "max_connections", "the primary lowered its value too")
	assert.Contains(t, pendingRestart(rows, true, commandSets, nil), "max_connections", "pg_control not read: the files' value")
	raised := []pendingRow{{name: "max_locks_per_transaction", inFile: true, file: "32", source: "command line", running: "64"},
		{name: "max_connections", inFile: true, file: "200", source: "command line", running: "100"}}
	assert.Equal(t, []string{"max_connections"}, pendingRestart(raised, true, commandSets, control), "raised in the files above the primary's")
	assert.Empty(t, pendingRestart(nil, true, commandSets, control))
}

// TestMissingLibrary: a shared_preload_libraries value naming a library
// the image does not have is refused before it reaches
// postgresql.auto.conf (the server would not start); one the image has,
// a path, or another parameter passes.
func TestMissingLibrary(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pg_stat_statements.so"), nil, 0o644))
	in := func(d string) func() string { return func() string { return d } }
	assert.Empty(t, missingLibrary("shared_preload_libraries", "pg_stat_statements", in(dir)))
	assert.Empty(t, missingLibrary("shared_preload_libraries", "'$libdir/pgaudit', /opt/x.so", in(dir)))
	assert.Empty(t, missingLibrary("work_mem", "pgaudit", func() string { panic("the library directory looked up for another parameter") }))
	why := missingLibrary("shared_preload_libraries", "pg_stat_statements, pgaudit", in(dir))
	assert.Contains(t, why, `library "pgaudit" is not in this image`)
	assert.Empty(t, missingLibrary("shared_preload_libraries", "pgaudit", in(filepath.Join(dir, "none"))), "no library directory: the server's own check stands")
}
