package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// `manager copy-self DIR` puts an executable copy of the binary in DIR;
// `manager agent` needs the server's command; anything else is the
// manager itself.
func TestSubcommands(t *testing.T) {
	dir := t.TempDir()
	ok, err := subcommand([]string{"copy-self", dir})
	assert.True(t, ok)
	require.NoError(t, err)
	fi, err := os.Stat(filepath.Join(dir, "manager"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm())

	ok, err = subcommand([]string{"copy-self"})
	assert.True(t, ok)
	assert.ErrorContains(t, err, "usage")

	t.Setenv("PGDATA", dir)
	ok, err = subcommand([]string{"agent", "--port=5433"})
	assert.True(t, ok)
	assert.ErrorContains(t, err, "no server command")

	ok, _ = subcommand([]string{"--controllers=*"})
	assert.False(t, ok, "flags are the manager's")
	ok, _ = subcommand(nil)
	assert.False(t, ok)
}
