package realnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Cleanup undoes what a real node left on this machine after its
// owner died (a crashed test, a killed demo): it takes the node lock, and if
// a journal is there, stops the processes it names (and any whose command
// line refers to the node's directory, such as containerd's shims, and the
// pods' processes in the kubepods cgroups), unmounts, deletes the bridge and
// the nftables tables, restores the sysctls and removes the directories,
// printing each thing it cleans. It refuses while a live node holds the lock.
func Cleanup() error {
	if _, err := os.Stat(journalPath); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	l, err := tryLock()
	if errors.Is(err, errLocked) {
		return fmt.Errorf("a real node of pid %s is running: stop it (Ctrl-C, make demo-down, or kill %s)", lockOwner(), lockOwner())
	}
	if err != nil {
		return err
	}
	defer l.release()
	return cleanupDead(func(s string) { fmt.Println("node-down: " + s) })
}

// cleanupDead undoes the journal of a dead owner, if any; the caller holds
// the lock.
func cleanupDead(say func(string)) error {
	j, err := readJournal()
	if err != nil || j == nil {
		return err
	}
	say(fmt.Sprintf("found the journal of a real node started %s by pid %d, which is gone; undoing it",
		j.Started.Format(time.RFC3339), j.Owner))
	return undo(j, say)
}

// undo reverses every host change the journal records; it is idempotent and
// removes the journal once everything is undone.
func undo(j *journal, say func(string)) error {
	var errs []error
	// A powered-off node's processes are frozen: SIGKILL waits for a thaw.
	thawCgroups(j, say)
	killNodeProcesses(j, say)
	errs = append(errs, removeNodeNetworks(j, say)...)
	mountErrs := unmountUnder(j, say)
	errs = append(errs, mountErrs...)
	errs = append(errs, removeCgroups(j, say)...)
	errs = append(errs, removeNftTables(j, say)...)
	if j.Bridge {
		if _, err := os.Stat("/sys/class/net/" + Bridge); err == nil {
			if _, err := host("", "ip", "link", "del", Bridge); err != nil {
				errs = append(errs, err)
			} else {
				say("deleted bridge " + Bridge + " and its route")
			}
		}
	}
	now := readSysctls()
	for k, v := range j.Sysctls {
		if now[k] != v {
			if _, err := host("", "sysctl", "-qw", k+"="+v); err != nil {
				errs = append(errs, err)
			} else {
				say(fmt.Sprintf("restored sysctl %s=%s (was %s)", k, v, now[k]))
			}
		}
	}
	for _, p := range j.CreatedPaths {
		if len(mountErrs) > 0 {
			break // never remove a directory something is still mounted under
		}
		if _, err := os.Lstat(p); err == nil {
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, fmt.Errorf("removing %s: %w", p, err))
			} else {
				say("removed " + p)
			}
		}
	}
	if j.Dir != "" && !j.Keep && len(mountErrs) == 0 {
		if err := os.RemoveAll(j.Dir); err != nil {
			errs = append(errs, fmt.Errorf("removing the cluster directory: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("tearing down the real node (journal kept in %s; `make node-down` retries): %w", journalPath, err)
	}
	return removeJournal()
}

// killNodeProcesses kills, by pid, the processes of the node that are still
// there: the pods' (in the kubepods cgroups the node created), the ones the
// journal names, and any whose command line refers to the node's
// directory (envtest's etcd and API server, containerd's shims); then
// waits for them to be gone.
func killNodeProcesses(j *journal, say func(string)) {
	pids := map[int]string{}
	// Every component names a path under the directory: match "<dir>/", so
	// that /tmp/dbkeeper-node-1 does not match /tmp/dbkeeper-node-12.
	under := j.Dir + "/"
	for name, pid := range j.Pids {
		if strings.Contains(cmdline(pid), under) {
			pids[pid] = name
		}
	}
	for _, pid := range processesReferring(under) {
		if _, ok := pids[pid]; !ok {
			pids[pid] = firstWord(cmdline(pid))
		}
	}
	for _, cg := range j.CreatedCgroups {
		for _, pid := range cgroupProcs(cg) {
			if _, ok := pids[pid]; !ok {
				pids[pid] = "pod process " + firstWord(cmdline(pid))
			}
		}
	}
	for pid, name := range pids {
		if pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			say(fmt.Sprintf("killed %s (pid %d)", name, pid))
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for pid := range pids {
		for time.Now().Before(deadline) && alive(pid) {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// removeCgroups removes the cgroups the node created, deepest first,
// waiting for killed processes to leave them.
func removeCgroups(j *journal, say func(string)) []error {
	var errs []error
	for _, cg := range j.CreatedCgroups {
		if _, err := os.Stat(cg); err != nil {
			continue
		}
		var dirs []string
		_ = filepath.WalkDir(cg, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		sort.Slice(dirs, func(a, b int) bool { return len(dirs[a]) > len(dirs[b]) })
		var last error
		deadline := time.Now().Add(10 * time.Second)
		for _, d := range dirs {
			for {
				last = syscall.Rmdir(d)
				if last == nil || errors.Is(last, syscall.ENOENT) || !errors.Is(last, syscall.EBUSY) || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		if _, err := os.Stat(cg); err == nil {
			errs = append(errs, fmt.Errorf("removing cgroup %s: %w", cg, last))
		} else {
			say("removed cgroup " + cg)
		}
	}
	return errs
}

// removeNftTables deletes the guard table, kube-proxy's tables, the tests'
// fault tables (FaultTablePrefix), and the
// tables the kubelet created through iptables-nft (KUBE-FIREWALL,
// KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT) when they did not exist before
// and hold nothing but such chains.
func removeNftTables(j *journal, say func(string)) []error {
	tables, err := nftTables()
	if err != nil {
		return []error{fmt.Errorf("listing nftables tables: %w", err)}
	}
	before := map[string]bool{}
	for _, t := range j.NftTablesBefore {
		before[t] = true
	}
	var errs []error
	for _, t := range tables {
		if before[t] {
			continue
		}
		fam, name, _ := strings.Cut(t, " ")
		switch {
		case t == "inet "+guardTable, t == "ip kube-proxy", t == "ip6 kube-proxy",
			fam == "inet" && strings.HasPrefix(name, FaultTablePrefix):
		case (fam == "ip" || fam == "ip6") && (name == "filter" || name == "nat" || name == "mangle"):
			body, err := host("", "nft", "list", "table", fam, name)
			if err != nil || !onlyKubeChains(body) {
				say("left nft table " + t + ": it holds more than the kubelet's chains")
				continue
			}
		default:
			continue
		}
		if _, err := host("", "nft", "delete", "table", fam, name); err != nil {
			errs = append(errs, err)
			continue
		}
		say("deleted nft table " + t)
	}
	return errs
}

// onlyKubeChains reports whether an nft table listing holds only KUBE-*
// chains and base chains whose rules only jump to them.
func onlyKubeChains(listing string) bool {
	base := map[string]bool{"INPUT": true, "OUTPUT": true, "FORWARD": true, "PREROUTING": true, "POSTROUTING": true}
	chain := ""
	for _, line := range strings.Split(listing, "\n") {
		l := strings.TrimSpace(line)
		switch {
		case l == "" || l == "}" || strings.HasPrefix(l, "table "):
		case strings.HasPrefix(l, "chain "):
			chain = strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(l, "chain ")), " {")
			if !strings.HasPrefix(chain, "KUBE-") && !base[chain] {
				return false
			}
		case strings.HasPrefix(chain, "KUBE-"):
		case strings.HasPrefix(l, "type ") && strings.Contains(l, " hook "):
		case strings.Contains(l, "jump KUBE-"):
		default:
			return false
		}
	}
	return true
}

// thawCgroups thaws every frozen cgroup the node created in the v1 freezer
// hierarchy (a node powered off), parents first.
func thawCgroups(j *journal, say func(string)) {
	for _, cg := range j.CreatedCgroups {
		if !strings.HasPrefix(cg, "/sys/fs/cgroup/freezer/") {
			continue
		}
		_ = filepath.WalkDir(cg, func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			state, err := os.ReadFile(filepath.Join(path, "freezer.state"))
			if err != nil || strings.TrimSpace(string(state)) == "THAWED" {
				return nil
			}
			if err := os.WriteFile(filepath.Join(path, "freezer.state"), []byte("THAWED"), 0o644); err == nil {
				say("thawed cgroup " + path)
			}
			return nil
		})
	}
}

// removeNodeNetworks deletes the network namespaces of several nodes
// (their veths, pod bridges, routes and nftables tables go with them) and
// any veth left on the host.
func removeNodeNetworks(j *journal, say func(string)) []error {
	var errs []error
	for _, ns := range j.Netns {
		if _, err := os.Stat("/run/netns/" + ns); err != nil {
			continue
		}
		if _, err := host("", "ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		} else {
			say("deleted network namespace " + ns)
		}
	}
	for _, v := range j.Veths {
		if _, err := os.Stat("/sys/class/net/" + v); err != nil {
			continue
		}
		// the namespace's deletion takes its veth with it, soon
		_, err := host("", "ip", "link", "del", v)
		for deadline := time.Now().Add(5 * time.Second); err != nil && time.Now().Before(deadline); {
			if _, gone := os.Stat("/sys/class/net/" + v); gone != nil {
				err = nil
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, err)
		} else {
			say("deleted link " + v)
		}
	}
	return errs
}
