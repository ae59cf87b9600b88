package realnode

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// sizedVolumes gives each volume of cluster.SizedStorageClassName a tmpfs
// of its claim's size (cluster.SizedVolumes).
type sizedVolumes struct{}

// Mount mounts a tmpfs of size bytes on path, the directory of a volume of
// SizedStorageClassName. It lives under the cluster directory, so teardown
// unmounts it even after a crash (unmountUnder).
func (sizedVolumes) Mount(path string, size int64) error {
	if size <= 0 {
		return errors.New("a sized volume needs a storage request")
	}
	if err := syscall.Mount("dbkeeper-volume", path, "tmpfs", 0, "size="+strconv.FormatInt(size, 10)+",mode=0755"); err != nil {
		return fmt.Errorf("mounting a tmpfs of %d bytes on %s: %w", size, path, err)
	}
	return nil
}

// Unmount unmounts a sized volume's tmpfs, if path is one.
func (sizedVolumes) Unmount(path string) error {
	if len(mountsUnder(path)) == 0 {
		return nil
	}
	if err := syscall.Unmount(path, 0); err != nil && !errors.Is(err, syscall.EINVAL) {
		if err := syscall.Unmount(path, syscall.MNT_DETACH); err != nil {
			return fmt.Errorf("unmounting %s: %w", path, err)
		}
	}
	if _, err := os.Stat(path); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("checking %s: %w", path, err)
	}
	return nil
}
