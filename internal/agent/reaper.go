package agent

import (
	"context"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// reaper starts the agent's children and, when the agent is PID 1, waits
// for the orphans the kernel hands it (a backend's child whose parent
// died), which would otherwise stay zombies. Its own children are waited
// by exec.Cmd.Wait; the reaper only waits zombies it did not start, so the
// two never race for one exit status.
type reaper struct {
	mu   sync.Mutex
	mine map[int]bool
}

func newReaper() *reaper { return &reaper{mine: map[int]bool{}} }

// start starts cmd and remembers it as the agent's own.
func (r *reaper) start(cmd *exec.Cmd) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	r.mine[cmd.Process.Pid] = true
	return nil
}

// adopt remembers pid, a child an earlier agent started in this process
// (a takeover), as the agent's own: its exec.Cmd waits for it.
func (r *reaper) adopt(pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mine[pid] = true
}

// startAndWait starts cmd as the agent's own and waits for it.
func (r *reaper) startAndWait(cmd *exec.Cmd) error {
	if err := r.start(cmd); err != nil {
		return err
	}
	return r.wait(cmd)
}

// wait waits for cmd, started by start.
func (r *reaper) wait(cmd *exec.Cmd) error {
	err := cmd.Wait()
	r.mu.Lock()
	delete(r.mine, cmd.Process.Pid)
	r.mu.Unlock()
	return err
}

// run reaps orphans on every SIGCHLD (and every few seconds, signals
// coalesce) until ctx ends; it does nothing unless the agent is PID 1.
func (r *reaper) run(ctx context.Context) {
	if os.Getpid() != 1 {
		return
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCHLD)
	defer signal.Stop(ch)
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
		case <-tick.C:
		}
		r.reap()
	}
}

// reap waits every zombie child of the agent that it did not start.
func (r *reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range children(os.Getpid()) {
		if r.mine[p.pid] || p.state != "Z" {
			continue
		}
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(p.pid, &ws, syscall.WNOHANG, nil)
	}
}

// process is one line of /proc: a pid and its state (R, S, Z, …).
type process struct {
	pid   int
	state string
}

// children are the processes whose parent is parent, from /proc.
func children(parent int) []process {
	var out []process
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// "pid (comm) S ppid ...": comm may hold anything, so split after
		// its closing parenthesis.
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 2 || fields[1] != strconv.Itoa(parent) {
			continue
		}
		out = append(out, process{pid: pid, state: fields[0]})
	}
	return out
}
