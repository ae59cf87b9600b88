package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDevNullIsNoTerminal: with stdin from /dev/null (a script, CI, a
// pipe-less shell) psql's client pod gets no terminal. Before, any
// character device counted as one, kubectl asked for a TTY it could not
// attach to, and psql's output was lost.
func TestDevNullIsNoTerminal(t *testing.T) {
	f, err := os.Open(os.DevNull)
	require.NoError(t, err)
	defer f.Close()
	assert.False(t, isTerminal(f))
}
