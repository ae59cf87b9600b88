package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/test/framework/cluster"
)

// fillFile is the name of the file that fills a volume, at its root
// (beside PGDATA, never in it).
const fillFile = "dbkeeper-fault-fill"

// VolumePath is the host directory of the volume of a pod's first
// persistent volume claim (its data volume): the local volume the
// cluster's provisioner made for the claim.
func (i *Injector) VolumePath(ctx context.Context, namespace, name string) (string, error) {
	pod, err := i.pod(ctx, namespace, name)
	if err != nil {
		return "", err
	}
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc := &corev1.PersistentVolumeClaim{}
		if err := i.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: v.PersistentVolumeClaim.ClaimName}, pvc); err != nil {
			return "", fmt.Errorf("getting claim %s: %w", v.PersistentVolumeClaim.ClaimName, err)
		}
		pv := &corev1.PersistentVolume{}
		if err := i.client.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv); err != nil {
			return "", fmt.Errorf("getting volume %q of claim %s: %w", pvc.Spec.VolumeName, pvc.Name, err)
		}
		if pv.Spec.Local == nil {
			return "", fmt.Errorf("volume %s of claim %s is not a local volume of the real node", pv.Name, pvc.Name)
		}
		return pv.Spec.Local.Path, nil
	}
	return "", fmt.Errorf("pod %s/%s has no persistent volume claim", namespace, name)
}

// FillVolume fills a pod's data volume (VolumePath) with one allocated
// file until no byte is left, and keeps it full until the returned Undo
// (see keepFull). It refuses a volume that is not a file system of its
// own (a volume of cluster.SizedStorageClassName is): filling a plain
// directory would fill the host's disk.
func (i *Injector) FillVolume(ctx context.Context, namespace, name string) (Undo, error) {
	path, err := i.VolumePath(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	own, err := ownFileSystem(path)
	if err != nil {
		return nil, err
	}
	if !own {
		return nil, fmt.Errorf("the volume of pod %s/%s (%s) shares the host's file system: give the Database storage class %q",
			namespace, name, path, cluster.SizedStorageClassName)
	}
	return keepFull(path)
}

// topUpInterval is how often a filled file system's freed space is taken
// again.
const topUpInterval = 20 * time.Millisecond

// keepFull fills the file system of dir with one allocated file, then
// takes whatever is freed on it every topUpInterval, as a full disk that
// stays full does: PostgreSQL frees space by itself (a checkpoint removes
// WAL segments a slot no longer holds), and CI saw a write of several MB
// succeed on a volume filled once. The Undo stops the top-up and removes
// the file; it reports a top-up that failed.
func keepFull(dir string) (Undo, error) {
	file := filepath.Join(dir, fillFile)
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", file, err)
	}
	remove := func() error {
		if err := os.Remove(file); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("removing %s: %w", file, err)
		}
		return nil
	}
	if err := fill(f); err != nil {
		return nil, errors.Join(err, f.Close(), remove())
	}
	stop, stopped := make(chan struct{}), make(chan error, 1)
	go func() {
		tick := time.NewTicker(topUpInterval)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				stopped <- nil
				return
			case <-tick.C:
				if err := fill(f); err != nil {
					stopped <- fmt.Errorf("keeping %s full: %w", dir, err)
					return
				}
			}
		}
	}()
	return once(func() error {
		close(stop)
		return errors.Join(<-stopped, f.Close(), remove())
	}), nil
}

// fill extends f until the file system has no room left: all it says is
// free at once, then what was freed meanwhile in shrinking steps down to
// a page.
func fill(f *os.File) error {
	var st syscall.Statfs_t
	if err := syscall.Fstatfs(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("statfs of %s: %w", f.Name(), err)
	}
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat of %s: %w", f.Name(), err)
	}
	size := fi.Size()
	for step := int64(st.Bavail) * st.Bsize; step >= 4096; {
		err := syscall.Fallocate(int(f.Fd()), 0, size, step)
		switch {
		case err == nil:
			size += step
		case errors.Is(err, syscall.ENOSPC):
			step /= 2
		default:
			return fmt.Errorf("allocating %d bytes in %s: %w", step, f.Name(), err)
		}
	}
	return nil
}

// ownFileSystem reports whether path is the root of a file system other
// than its parent's.
func ownFileSystem(path string) (bool, error) {
	var st, parent syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return false, fmt.Errorf("stat %s: %w", path, err)
	}
	if err := syscall.Stat(filepath.Dir(path), &parent); err != nil {
		return false, fmt.Errorf("stat %s: %w", filepath.Dir(path), err)
	}
	return st.Dev != parent.Dev, nil
}

// Free is how many bytes the file system of a pod's data volume has free
// for an unprivileged writer.
func (i *Injector) Free(ctx context.Context, namespace, name string) (int64, error) {
	path, err := i.VolumePath(ctx, namespace, name)
	if err != nil {
		return 0, err
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("statfs of %s: %w", path, err)
	}
	return int64(st.Bavail) * st.Bsize, nil
}
