package realnode

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// What teardown finds on the host: processes by command line and cgroup,
// mounts by directory.

// processesReferring returns the processes whose command line contains s.
func processesReferring(s string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if strings.Contains(cmdline(pid), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func cmdline(pid int) string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return ""
	}
	return strings.ReplaceAll(string(data), "\x00", " ")
}

func firstWord(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return filepath.Base(f[0])
	}
	return "process"
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// cgroupProcs returns the processes in cg and every cgroup below it.
func cgroupProcs(cg string) []int {
	var pids []int
	_ = filepath.WalkDir(cg, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		data, _ := os.ReadFile(path)
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// nodeMountRoots are the directories under which the node's mounts live.
func nodeMountRoots(j *journal) []string {
	roots := []string{}
	if j.Dir != "" {
		roots = append(roots, j.Dir)
	}
	if j.ContainerdRoot != "" {
		roots = append(roots, j.ContainerdRoot)
	}
	roots = append(roots, j.ContainerdRoots...)
	for _, p := range j.CreatedPaths {
		roots = append(roots, p)
	}
	return roots
}

// mountsUnder returns the mount points at or under any of roots, deepest
// first.
func mountsUnder(roots ...string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var mounts []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		m := unescapeMount(f[4])
		for _, r := range roots {
			if m == r || strings.HasPrefix(m, r+"/") {
				mounts = append(mounts, m)
				break
			}
		}
	}
	sort.Slice(mounts, func(a, b int) bool { return len(mounts[a]) > len(mounts[b]) })
	return mounts
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder unmounts everything under the node's directories, deepest
// first (pod volumes, overlay root filesystems, network namespaces, the
// kubelet root's own bind mount).
func unmountUnder(j *journal, say func(string)) []error {
	roots := nodeMountRoots(j)
	for range 5 {
		mounts := mountsUnder(roots...)
		if len(mounts) == 0 {
			return nil
		}
		for _, m := range mounts {
			if err := syscall.Unmount(m, 0); err != nil {
				_ = syscall.Unmount(m, syscall.MNT_DETACH)
			}
		}
		say(fmt.Sprintf("unmounted %d mounts under %s", len(mounts), strings.Join(roots, ", ")))
	}
	if left := mountsUnder(roots...); len(left) > 0 {
		return []error{fmt.Errorf("mounts left: %s", strings.Join(left, ", "))}
	}
	return nil
}
