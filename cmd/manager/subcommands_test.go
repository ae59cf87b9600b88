package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/dbkeeper/dbkeeper/internal/agent"
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

// TestAgentLogsJSON: in the engine pod (no logging flags) the agent logs
// JSON lines of zap's production encoder, each naming the instance as
// agent.Main does, with the time as the server's JSON lines write it.
func TestAgentLogsJSON(t *testing.T) {
	var buf bytes.Buffer
	zapOpts := zap.Options{TimeEncoder: zapcore.ISO8601TimeEncoder}
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	zapOpts.BindFlags(fs)
	require.NoError(t, fs.Parse(nil))
	zapOpts.DestWriter = &buf
	cfg := agent.Config{Namespace: "shop", Pod: "orders-1"}
	agentLogger(&zapOpts).WithName("agent").WithValues(cfg.LogValues()...).Info("Started the server", "pid", 42)
	var line map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line), "%s", buf.String())
	assert.Equal(t, "info", line["level"])
	assert.Equal(t, "agent", line["logger"])
	assert.Equal(t, "Started the server", line["msg"])
	assert.Equal(t, "shop", line["namespace"])
	assert.Equal(t, "orders", line["database"])
	assert.Equal(t, "orders-1", line["pod"])
	_, err := time.Parse("2006-01-02T15:04:05.000Z0700", line["ts"].(string))
	assert.NoError(t, err, "ts: %v", line["ts"])
}

// TestTerminationMessage: why the agent exits becomes the container's
// termination message when the kubelet mounted the file, and nothing is
// made where it did not.
func TestTerminationMessage(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "termination-log")
	require.NoError(t, os.WriteFile(path, []byte("an older, longer message"), 0o666))
	writeTerminationMessage(path, errors.New("agent: the server exited: exit status 1: FATAL: could not map anonymous shared memory"))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "agent: the server exited: exit status 1: FATAL: could not map anonymous shared memory", string(b))

	missing := filepath.Join(dir, "none")
	writeTerminationMessage(missing, errors.New("x"))
	assert.NoFileExists(t, missing)

	assert.True(t, errors.As(fmt.Errorf("wrapped: %w", loggedError{errors.New("x")}), new(loggedError)))
}
