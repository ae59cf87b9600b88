package faults

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Container is an engine container's processes on the host, as found by
// Processes.
type Container struct {
	// Pod is namespace/name, ID the container's ID.
	Pod, ID string
	// podUID is how the container's cgroup names its pod.
	podUID string
	// Pids are every process of the container.
	Pids []int
	// Agent is the container's PID 1 (`manager agent`), 0 if not found.
	Agent int
	// Postmaster is the agent's postgres child, 0 when no server runs.
	Postmaster int
	// WALReceiver is the postmaster's walreceiver child, 0 when none
	// runs (a primary, or a standby not streaming).
	WALReceiver int
}

// Processes finds the processes of a pod's running engine container (or
// the container ForContainer names): those whose cgroup names both the
// pod's UID and the container's ID.
func (i *Injector) Processes(ctx context.Context, namespace, name string) (*Container, error) {
	pod, err := i.pod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	id, err := containerID(pod, i.container)
	if err != nil {
		return nil, err
	}
	c := &Container{Pod: namespace + "/" + name, ID: id, podUID: string(pod.UID)}
	if err := c.scan(); err != nil {
		return nil, err
	}
	return c, nil
}

// scan fills the container's processes from /proc.
func (c *Container) scan() error {
	c.Pids, c.Agent, c.Postmaster, c.WALReceiver = nil, 0, 0, 0
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("listing /proc: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !inContainer(pid, c.podUID, c.ID) {
			continue
		}
		c.Pids = append(c.Pids, pid)
	}
	if len(c.Pids) == 0 {
		return fmt.Errorf("no process of container %s of pod %s on this host", c.ID, c.Pod)
	}
	for _, pid := range c.Pids {
		if nsPid(pid) == 1 {
			c.Agent = pid
		}
	}
	for _, pid := range c.Pids {
		if c.Agent != 0 && parent(pid) == c.Agent && comm(pid) == "postgres" {
			c.Postmaster = pid
		}
	}
	for _, pid := range c.Pids {
		if c.Postmaster != 0 && parent(pid) == c.Postmaster && strings.Contains(Cmdline(pid), "walreceiver") {
			c.WALReceiver = pid
		}
	}
	return nil
}

// inContainer reports whether pid's cgroup names the pod (by UID, as the
// cgroupfs driver spells it or as the systemd driver does) and the
// container.
func inContainer(pid int, podUID, containerID string) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	s := string(data)
	return strings.Contains(s, containerID) &&
		(strings.Contains(s, "pod"+podUID) || strings.Contains(s, "pod"+strings.ReplaceAll(podUID, "-", "_")))
}

// nsPid is pid's process ID in its innermost PID namespace, 0 if unknown.
func nsPid(pid int) int {
	f := strings.Fields(statusField(pid, "NSpid"))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(f[len(f)-1])
	return n
}

// Descendants are the processes under pid (its children, theirs, ...),
// from /proc.
func Descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if p, err := strconv.Atoi(e.Name()); err == nil {
			if pp := parent(p); pp != 0 {
				children[pp] = append(children[pp], p)
			}
		}
	}
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// parent is pid's parent process ID, 0 if unknown.
func parent(pid int) int {
	n, _ := strconv.Atoi(statusField(pid, "PPid"))
	return n
}

// comm is pid's command name.
func comm(pid int) string {
	data, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(data))
}

// Cmdline is pid's command line, its arguments joined by spaces (a
// PostgreSQL child's is its process title).
func Cmdline(pid int) string {
	data, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.TrimSpace(strings.ReplaceAll(string(data), "\x00", " "))
}

// State is pid's scheduler state letter (R, S, D, T, t, Z...), "" when it
// is gone.
func State(pid int) string {
	f := strings.Fields(statusField(pid, "State"))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// statusField is one field of /proc/<pid>/status, "" when absent.
func statusField(pid int, key string) string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Describe lists the container's processes, for a test's log.
func (c *Container) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "container %s of %s:", c.ID[:min(12, len(c.ID))], c.Pod)
	for _, pid := range c.Pids {
		fmt.Fprintf(&b, "\n  %d (ppid %d, %s) %s", pid, parent(pid), State(pid), Cmdline(pid))
	}
	return b.String()
}

// Alive reports whether pid exists and is not a zombie.
func Alive(pid int) bool {
	s := State(pid)
	return s != "" && s != "Z"
}
