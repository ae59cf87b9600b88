package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// fenceKillAfter is how long a fence waits for the postmaster's immediate
// shutdown before it kills the server's process group.
const fenceKillAfter = time.Second

// fencedMarker is the file, beside the data directory on its volume, that
// says the instance fenced itself as a primary: its data directory must
// not start as a primary unless the lease still names it, and rejoins
// another holder with pg_rewind. It survives restarts of the container.
func (a *Agent) fencedMarker() string {
	return filepath.Join(filepath.Dir(a.cfg.PGData), "dbkeeper-fenced")
}

func (a *Agent) isFenced() bool {
	_, err := os.Stat(a.fencedMarker())
	return err == nil
}

func (a *Agent) clearFenced() error {
	if err := os.Remove(a.fencedMarker()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the fence marker: %w", err)
	}
	return nil
}

// fence stops the server at once because the primary lease is lost
// (reason): SIGQUIT to the postmaster (an immediate shutdown: no session
// commits anything more), SIGKILL of its process group when it still
// runs fenceKillAfter later. The instance then waits, Fenced, for another
// holder of the lease and rejoins it as a standby, or serves again when
// the lease still names it (rejoin).
func (a *Agent) fence(reason string) {
	at := time.Now()
	a.mu.Lock()
	srv := a.srv
	if srv != nil {
		srv.expected = true
	}
	a.fencedAt = at
	a.state, a.message = agentapi.StateFenced, fmt.Sprintf("fenced at %s: %s", at.UTC().Format(time.RFC3339Nano), reason)
	a.mu.Unlock()
	var pid int
	var backends []process
	if srv != nil {
		// The SIGQUIT first: a postmaster thawed after a freeze (or one
		// that was starved) serves the sessions queued meanwhile at once,
		// and any moment before the signal is one in which a commit may be
		// acknowledged. PostgreSQL's backends each run in a session of
		// their own (setsid), not in the postmaster's process group: a
		// postmaster that cannot pass the SIGQUIT on (stuck, stopped)
		// would leave them running, and a statement in progress could
		// still commit. They are killed by pid below, listed while the
		// postmaster is alive (it waits for them in an immediate shutdown;
		// its orphans become the agent's).
		pid = srv.cmd.Process.Pid
		_ = syscall.Kill(pid, syscall.SIGQUIT)
		backends = children(pid)
	}
	if err := os.WriteFile(a.fencedMarker(), []byte(at.UTC().Format(time.RFC3339Nano)+" "+reason+"\n"), 0o600); err != nil {
		a.log.Error(err, "Cannot write the fence marker")
	}
	if srv != nil {
		a.log.Info("Fencing: immediate shutdown of the server", "pid", pid, "reason", reason)
		select {
		case <-srv.done:
		case <-time.After(fenceKillAfter):
			backends = append(backends, children(pid)...)
			a.log.Info("The server outlived its immediate shutdown: killing it and its backends", "pid", pid, "backends", len(backends))
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			for _, b := range backends {
				_ = syscall.Kill(b.pid, syscall.SIGKILL)
			}
			<-srv.done
		}
		// the entrypoint's shell, before it execs the server, and what it
		// started are in the group.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	a.log.Info("Fenced", "reason", reason, "stopped", time.Since(at).Round(time.Millisecond))
	go a.rejoinWhenLost()
}

// rejoinWhenLost waits until the lease names another holder, then rejoins
// it as a standby (pg_rewind first), retrying with backoff; or, when the
// lease still names this instance, serves again (rejoin).
func (a *Agent) rejoinWhenLost() {
	a.op.Lock()
	defer a.op.Unlock()
	a.rejoin()
}

// rejoin (under a.op) waits for another holder of the lease and rejoins it
// as a standby, retrying with backoff until it streams or the agent stops.
// A fenced primary whose lease, once read again, still names it (nobody
// took it: the API server was away, or the agent frozen) or that released
// it itself (mayServeAgain) takes it back and starts its data directory
// as the primary again (serveAgain).
func (a *Agent) rejoin() {
	backoff := agentapi.LeaseRetryPeriod
	for {
		a.mu.Lock()
		base := a.message
		stopping := a.stopping
		a.mu.Unlock()
		if stopping || a.ctx.Err() != nil {
			return
		}
		holder, read := "", false
		if a.keeper != nil {
			if _, err := a.keeper.read(a.ctx); err == nil {
				holder, read = a.keeper.observation().Record.Holder, true
			}
		}
		if read && !isStandby(a.cfg.PGData) && hasCluster(a.cfg.PGData) {
			if ok, _ := mayServeAgain(a.cfg.Pod, a.keeper.observation().Record); ok {
				if a.serveAgain() {
					return
				}
				holder = a.keeper.observation().Record.Holder
			}
		}
		if holder != "" && holder != a.cfg.Pod {
			err := a.rewindAndStart()
			if err == nil {
				return
			}
			a.log.Error(err, "Cannot rejoin as a standby: retrying", "in", backoff)
			a.setState(agentapi.StateFenced, fmt.Sprintf("rejoining %s as a standby: %v", holder, err))
		} else {
			a.setState(agentapi.StateFenced, withoutSuffix(base)+rejoinSuffix)
			backoff = agentapi.LeaseRetryPeriod
		}
		select {
		case <-a.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// serveAgain (under a.op) takes back the lease of a fenced primary that
// may serve again (keeper.retake), clears the fence marker and starts the
// server as the primary; false when it did not take the lease.
func (a *Agent) serveAgain() bool {
	v, err := a.keeper.retake(a.ctx)
	if err != nil || !v.May {
		why := v.Reason
		if err != nil {
			why = err.Error()
		}
		a.log.Info("Cannot take the primary lease back yet", "reason", why)
		return false
	}
	if err := a.clearFenced(); err != nil {
		a.fail(err)
		return true
	}
	a.log.Info("Holding the primary lease again: starting as the primary", "why", v.Reason)
	if err := a.startServer(agentapi.StateStarting); err != nil {
		a.fail(err)
	}
	return true
}

// rejoinSuffix is what rejoin appends to a Fenced message while it waits.
const rejoinSuffix = "; waiting for the primary lease: another holder to rejoin, or this instance again to serve"

// withoutSuffix drops what rejoin appended to a Fenced message.
func withoutSuffix(msg string) string {
	return strings.TrimSuffix(msg, rejoinSuffix)
}
