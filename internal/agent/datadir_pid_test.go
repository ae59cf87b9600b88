package agent

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A postmaster.pid naming a process that is not postgres (after a
// container restart, the pid of any process: here the test's own, which
// postgres would take for a running server) is removed; one naming no
// process too; none is left alone.
func TestRemoveStalePidFile(t *testing.T) {
	dir := t.TempDir()
	removed, err := removeStalePidFile(dir)
	require.NoError(t, err)
	assert.False(t, removed, "no postmaster.pid")

	for name, pid := range map[string]int{"a live process that is not postgres": os.Getpid(), "no process": 1 << 22} {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "postmaster.pid"), []byte(strconv.Itoa(pid)+"\n/data\n"), 0o600))
			removed, err := removeStalePidFile(dir)
			require.NoError(t, err)
			assert.True(t, removed)
			assert.NoFileExists(t, filepath.Join(dir, "postmaster.pid"))
		})
	}
}

// The line that says why a server's program failed: its FATAL, not the
// timestamp of the first line.
func TestErrorLine(t *testing.T) {
	out := "2026-12-04 17:53:37.123 UTC [42] LOG:  database system was interrupted\n" +
		"2026-12-04 17:53:37.124 UTC [42] FATAL:  lock file \"postmaster.pid\" already exists\n" +
		"2026-12-04 17:53:37.124 UTC [42] HINT:  Is another postgres (PID 9) running?\n"
	assert.Equal(t, `FATAL:  lock file "postmaster.pid" already exists`, errorLine(out))
	assert.Equal(t, "pg_rewind: error: could not connect", errorLine("pg_rewind: connecting\npg_rewind: error: could not connect\n"))
	assert.Equal(t, "last", errorLine("first\nlast\n"))
}
