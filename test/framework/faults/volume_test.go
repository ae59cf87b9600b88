package faults

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKeepFullTakesWhatIsFreed fills a small tmpfs, frees a file on it as
// a checkpoint frees WAL segments, and checks that the space is taken
// again: a write that needs it is refused until the Undo, which leaves the
// file system as it found it. A volume filled once (CI's defect) kept the
// freed megabyte free.
func TestKeepFullTakesWhatIsFreed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	require.NoError(t, syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"))
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	segment := filepath.Join(dir, "000000010000000000000001")
	require.NoError(t, os.WriteFile(segment, make([]byte, 1<<20), 0o600))
	before := free(t, dir)

	undo, err := keepFull(dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = undo() })
	assert.Less(t, free(t, dir), int64(4096), "full at once")

	require.NoError(t, os.Remove(segment))
	require.Eventually(t, func() bool { return free(t, dir) < 4096 }, time.Second, 5*time.Millisecond,
		"the megabyte freed after the fill is taken again")
	err = os.WriteFile(filepath.Join(dir, "table"), make([]byte, 64<<10), 0o600)
	require.Error(t, err, "a write of 64 KiB on the kept-full file system")
	assert.True(t, errors.Is(err, syscall.ENOSPC), "refused for want of space: %v", err)
	require.NoError(t, os.Remove(filepath.Join(dir, "table")))

	require.NoError(t, undo())
	require.NoError(t, undo(), "a second undo does nothing")
	_, err = os.Stat(filepath.Join(dir, fillFile))
	assert.True(t, os.IsNotExist(err), "the fill file is gone: %v", err)
	assert.GreaterOrEqual(t, free(t, dir), before+(1<<20), "the space is back, the freed megabyte with it")
}

// free is how many bytes the file system of dir has free.
func free(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	require.NoError(t, syscall.Statfs(dir, &st))
	return int64(st.Bavail) * st.Bsize
}
