package agent

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// libDirs are where a Debian image's dynamic loader finds shared
// libraries (no program of the server carries a run path).
var libDirs = []string{"/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib", "/lib"}

// CopyEngine is `manager copy-engine MAJOR DIR`, the init container of an
// in-place major upgrade, which runs in the old major's image: it copies
// that major's server (usr/lib/postgresql/MAJOR, usr/share/postgresql/
// MAJOR) under dst, and into dst/libs every shared library its programs
// and modules load, found as the dynamic loader finds them. The new
// image's agent runs pg_upgrade with these programs (upgradeMajor). It
// copies nothing when $PGDATA holds a cluster of another major (the
// upgrade is done: a restart costs no copy), and returns what it did.
func CopyEngine(major, dst string) (string, error) {
	if v := dataVersion(os.Getenv("PGDATA")); v != "" && v != major {
		return fmt.Sprintf("the data directory is of PostgreSQL %s, not %s: nothing to copy", v, major), nil
	}
	bin := filepath.Join("/usr/lib/postgresql", major)
	if _, err := os.Stat(filepath.Join(bin, "bin", "postgres")); err != nil {
		return "", fmt.Errorf("this image has no PostgreSQL %s server: %w", major, err)
	}
	if err := os.RemoveAll(filepath.Join(dst, "usr")); err != nil {
		return "", err
	}
	if err := os.RemoveAll(filepath.Join(dst, "libs")); err != nil {
		return "", err
	}
	var elfs []string
	for _, dir := range []string{bin, filepath.Join("/usr/share/postgresql", major)} {
		n, err := copyTree(dir, filepath.Join(dst, dir))
		if err != nil {
			return "", err
		}
		elfs = append(elfs, n...)
	}
	libs, err := neededLibraries(elfs)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Join(dst, "libs"), 0o755); err != nil {
		return "", err
	}
	for name, path := range libs {
		if err := copyFile(path, filepath.Join(dst, "libs", name), 0o644); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("copied PostgreSQL %s's server and %d shared libraries to %s", major, len(libs), dst), nil
}

// copyTree copies the regular files and links under src to dst and
// returns the ELF files among them.
func copyTree(src, dst string) ([]string, error) {
	var elfs []string
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case info.Mode().IsRegular():
			if isELF(path) {
				elfs = append(elfs, path)
			}
			return copyFile(path, to, info.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("copying %s: %w", src, err)
	}
	return elfs, nil
}

// isELF says whether path starts as an ELF file does.
func isELF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	magic := make([]byte, 4)
	_, err = io.ReadFull(f, magic)
	return err == nil && string(magic) == elf.ELFMAG
}

// neededLibraries is every shared library files load, directly or
// through another, by name, with the path the loader would take it from.
// The C library and the loader itself are left out: the old programs run
// on the new image's (glibc is backward compatible, and mixing two is
// what fails).
func neededLibraries(files []string) (map[string]string, error) {
	found := map[string]string{}
	queue := append([]string(nil), files...)
	for len(queue) > 0 {
		path := queue[0]
		queue = queue[1:]
		f, err := elf.Open(path)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		names, err := f.ImportedLibraries()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		for _, name := range names {
			if _, ok := found[name]; ok || systemLibrary(name) {
				continue
			}
			lib := findLibrary(name)
			if lib == "" {
				return nil, fmt.Errorf("%s loads %s, which is in none of %s", path, name, strings.Join(libDirs, ", "))
			}
			found[name] = lib
			queue = append(queue, lib)
		}
	}
	return found, nil
}

// systemLibrary says whether name is the C library's or the loader's,
// which the new image's own serve.
func systemLibrary(name string) bool {
	for _, p := range []string{"libc.so", "libm.so", "libdl.so", "libpthread.so", "librt.so", "ld-linux", "libresolv.so", "libutil.so"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// findLibrary is the path of the shared library name in libDirs, "" when
// none has it.
func findLibrary(name string) string {
	for _, dir := range libDirs {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// copyFile copies src (following links) to dst with mode perm.
func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copying %s: %w", src, err)
	}
	return out.Close()
}

// dataVersion is the major of the cluster in pgdata (PG_VERSION), "" when
// it holds none.
func dataVersion(pgdata string) string {
	if pgdata == "" {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(pgdata, versionFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// errNoOldEngine is returned when OldEngineDir holds no old server.
var errNoOldEngine = errors.New("the old major's server was not copied into the pod")
