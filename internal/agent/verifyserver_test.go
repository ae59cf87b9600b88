package agent

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestVerifyServerDyingDuringTheReplayEnds: when the throwaway server of a
// verification exits before it promoted, waitPromoted says so and stopping
// it returns at once. Before, waitPromoted took the one exit value and
// stop then waited for it forever, so the verification Job never ended
// and wrote no report.
func TestVerifyServerDyingDuringTheReplayEnds(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "postgres.log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	server, err := watchServer(exec.Command("sh", "-c", "echo 'FATAL:  could not locate a valid checkpoint record'; exit 1"), logFile, logPath)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = waitPromoted(ctx, VerifyConfig{SocketDir: t.TempDir(), Port: 1, User: "postgres"}, server)
	require.ErrorContains(t, err, "the server stopped during the replay")
	require.ErrorContains(t, err, "could not locate a valid checkpoint record")

	stopped := make(chan struct{})
	go func() {
		server.stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("stop did not return for a server that had already exited")
	}
}
