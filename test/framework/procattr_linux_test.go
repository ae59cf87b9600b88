package framework_test

import (
	"os/exec"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/test/framework"
)

// TestChildrenHaveTheirOwnProcessGroup: a child started with SysProcAttr
// leads a process group of its own, so that the terminal's SIGINT to the
// foreground group does not reach it.
func TestChildrenHaveTheirOwnProcessGroup(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = framework.SysProcAttr()
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pgid, err := syscall.Getpgid(cmd.Process.Pid)
	require.NoError(t, err)
	assert.Equal(t, cmd.Process.Pid, pgid, "the child leads its own process group")
	assert.NotEqual(t, syscall.Getpgrp(), pgid, "the child is not in the test's process group")
}
