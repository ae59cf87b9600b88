package faults

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDescendants: a process's children and grandchildren are found, and
// nothing else.
func TestDescendants(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	require.Eventually(t, func() bool { return len(Descendants(cmd.Process.Pid)) == 1 }, 5*time.Second, 20*time.Millisecond)
	sleep := Descendants(cmd.Process.Pid)[0]
	assert.Contains(t, Cmdline(sleep), "sleep 30")
	assert.Contains(t, Descendants(os.Getpid()), sleep, "a grandchild")
	assert.NotContains(t, Descendants(cmd.Process.Pid), cmd.Process.Pid)
	t.Cleanup(func() { _ = syscall.Kill(sleep, syscall.SIGKILL) })
}
