package agent

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// CopySelf copies the running executable to dir/manager (mode 0755): the
// init container's `manager copy-self`, which puts the agent where the
// engine container runs it. The copy is written beside its final name and
// renamed, so a reader never sees half a binary.
func CopySelf(dir string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding the running executable: %w", err)
	}
	src, err := os.Open(self)
	if err != nil {
		return "", fmt.Errorf("copying %s: %w", self, err)
	}
	defer src.Close()
	dst := filepath.Join(dir, "manager")
	tmp, err := os.CreateTemp(dir, ".manager-")
	if err != nil {
		return "", fmt.Errorf("copying %s to %s: %w", self, dir, err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return "", fmt.Errorf("copying %s to %s: %w", self, dst, err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", fmt.Errorf("copying %s to %s: %w", self, dst, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", fmt.Errorf("copying %s to %s: %w", self, dst, err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("copying %s to %s: %w", self, dst, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", fmt.Errorf("copying %s to %s: %w", self, dst, err)
	}
	return dst, nil
}
