package faults

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"
)

// KillPostmaster sends SIGKILL to the postmaster of a pod's engine
// container and returns its host PID: the server dies without a shutdown
// checkpoint, its backends follow, and the agent sees it gone.
func (i *Injector) KillPostmaster(ctx context.Context, namespace, name string) (int, error) {
	c, err := i.Processes(ctx, namespace, name)
	if err != nil {
		return 0, err
	}
	if c.Postmaster == 0 {
		return 0, fmt.Errorf("no postmaster in %s", c.Describe())
	}
	return c.Postmaster, kill(c.Postmaster, syscall.SIGKILL)
}

// KillAgent sends SIGKILL to the agent, PID 1 of a pod's engine
// container, and returns its host PID: the kernel then kills every other
// process of the container (PostgreSQL with it), and the kubelet restarts
// the container.
func (i *Injector) KillAgent(ctx context.Context, namespace, name string) (int, error) {
	c, err := i.Processes(ctx, namespace, name)
	if err != nil {
		return 0, err
	}
	if c.Agent == 0 {
		return 0, fmt.Errorf("no PID 1 in %s", c.Describe())
	}
	return c.Agent, kill(c.Agent, syscall.SIGKILL)
}

// Undo reverses a fault. It is safe to call more than once.
type Undo func() error

// Freeze stops (SIGSTOP) every process of a pod's engine container, the
// agent and the whole server, as a paused VM or a stuck node would, until
// the returned Undo continues them (SIGCONT). A process the agent forks
// while the others are being stopped is stopped too: it scans until a scan
// finds nothing new. SIGKILL still ends stopped processes, so the kubelet
// (liveness probe) and the node's teardown can remove the container.
func (i *Injector) Freeze(ctx context.Context, namespace, name string) (Undo, error) {
	c, err := i.Processes(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	stopped := map[int]bool{}
	thaw := func() error {
		var errs []error
		for pid := range stopped {
			if err := kill(pid, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, err)
			}
		}
		stopped = map[int]bool{}
		return errors.Join(errs...)
	}
	for range 20 {
		fresh := false
		for _, pid := range c.Pids {
			if stopped[pid] {
				continue
			}
			if err := kill(pid, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
				return nil, errors.Join(err, thaw())
			}
			stopped[pid], fresh = true, true
		}
		if !fresh {
			if err := waitStopped(c.Pids); err != nil {
				return nil, errors.Join(err, thaw())
			}
			return once(thaw), nil
		}
		if err := c.scan(); err != nil {
			return nil, errors.Join(err, thaw())
		}
	}
	return nil, errors.Join(fmt.Errorf("the processes of %s kept changing while being stopped", c.Pod), thaw())
}

// PauseWALReceiver stops (SIGSTOP) a standby's walreceiver until the
// returned Undo continues it: the standby stops receiving WAL while its
// status still says streaming, the lagging standby of a failover test.
func (i *Injector) PauseWALReceiver(ctx context.Context, namespace, name string) (Undo, error) {
	c, err := i.Processes(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	if c.WALReceiver == 0 {
		return nil, fmt.Errorf("no walreceiver in %s", c.Describe())
	}
	pid := c.WALReceiver
	if err := kill(pid, syscall.SIGSTOP); err != nil {
		return nil, err
	}
	resume := once(func() error {
		if err := kill(pid, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
			return err
		}
		return nil
	})
	if err := waitStopped([]int{pid}); err != nil {
		return nil, errors.Join(err, resume())
	}
	return resume, nil
}

// kill sends sig to pid.
func kill(pid int, sig syscall.Signal) error {
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("sending %s to pid %d: %w", sig, pid, err)
	}
	return nil
}

// waitStopped waits (up to 2 s) until each of pids is stopped or gone.
func waitStopped(pids []int) error {
	deadline := time.Now().Add(2 * time.Second)
	for _, pid := range pids {
		for {
			s := State(pid)
			if s == "" || s == "T" || s == "t" || s == "Z" {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("pid %d (%s) not stopped after SIGSTOP: state %s", pid, Cmdline(pid), s)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

// once makes undo run its body once; later calls return nil.
func once(undo func() error) Undo {
	done := false
	return func() error {
		if done {
			return nil
		}
		done = true
		return undo()
	}
}
