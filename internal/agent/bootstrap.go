package agent

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// bootstrap fills an empty data directory as req says; the work goes on
// after the answer. After a failed one the next is refused (409) for
// recoveryRetryDelay of the failures in a row: a restore that cannot
// succeed (no backup before its target) is not run again every poll.
func (a *Agent) bootstrap(req agentapi.BootstrapRequest) error {
	if req.Mode != agentapi.BootstrapInitdb && req.Mode != agentapi.BootstrapClone && req.Mode != agentapi.BootstrapRestore {
		return &opError{code: http.StatusBadRequest, msg: fmt.Sprintf("unknown bootstrap mode %q", req.Mode)}
	}
	if req.Mode == agentapi.BootstrapRestore {
		if err := checkRestore(req); err != nil {
			return err
		}
	}
	if wait, why := a.bootstrapBackoff(time.Now()); wait > 0 {
		return conflict("%s; trying again in %s", why, wait.Round(time.Second))
	}
	if !a.op.TryLock() {
		return errBusy
	}
	a.mu.Lock()
	state := a.state
	a.mu.Unlock()
	empty, err := isEmpty(a.cfg.PGData)
	if err != nil {
		a.op.Unlock()
		return err
	}
	if !empty || state != agentapi.StateWaiting {
		a.op.Unlock()
		return conflict("the data directory is not empty (state %s): bootstrap only fills an empty one", state)
	}
	a.log.Info("Bootstrapping", "mode", req.Mode)
	a.forgetStarts()
	if req.Mode == agentapi.BootstrapInitdb && a.keeper == nil {
		// no lease to wait for: the answer says whether the server started
		defer a.op.Unlock()
		if err := a.startServer(agentapi.StateBootstrapping); err != nil {
			a.bootstrapFailed(err.Error())
			return err
		}
		return nil
	}
	if req.Mode != agentapi.BootstrapClone {
		// a new primary (initdb, restore): only once it holds the primary
		// lease (when it has one). The image's entrypoint runs initdb, then
		// the server; a restore restores, then starts the server.
		a.setState(agentapi.StateBootstrapping, "waiting for the primary lease")
		go func() {
			defer a.op.Unlock()
			if a.keeper != nil {
				if err := a.keeper.acquire(a.ctx, func(msg string) { a.setState(agentapi.StateBootstrapping, msg) }); err != nil {
					a.setState(agentapi.StateWaiting, string(req.Mode)+": "+err.Error())
					return
				}
			}
			var err error
			if req.Mode == agentapi.BootstrapRestore {
				err = a.restore(*req.Recovery)
			} else {
				err = a.startServer(agentapi.StateBootstrapping)
			}
			if err != nil {
				a.bootstrapFailed(string(req.Mode) + ": " + err.Error())
			}
		}()
		return nil
	}
	a.setState(agentapi.StateBootstrapping, "")
	go func() {
		defer a.op.Unlock()
		a.clone()
	}()
	return nil
}

// clone copies the primary with pg_basebackup and starts a standby. A
// failed copy leaves the data directory empty again (it was empty when the
// copy began) and the agent Waiting.
func (a *Agent) clone() {
	start := time.Now()
	cmd := exec.CommandContext(a.ctx, "pg_basebackup", "-D", a.cfg.PGData,
		"-h", a.cfg.PrimaryHost, "-p", strconv.Itoa(a.cfg.PrimaryPort), "-U", agentapi.ReplicationUser,
		"-X", "stream", "-c", "fast", "-w")
	cmd.Env = append(os.Environ(), append(a.sslEnv(), "PGPASSFILE="+a.pgpass, "PGAPPNAME="+a.cfg.Pod)...)
	var msg bytes.Buffer
	cmd.Stdout, cmd.Stderr = os.Stdout, io.MultiWriter(os.Stderr, &msg)
	err := a.reaper.start(cmd)
	if err == nil {
		if err = a.reaper.wait(cmd); err != nil {
			err = fmt.Errorf("pg_basebackup: %w: %s", err, errorLine(msg.String()))
		}
	}
	if err == nil {
		err = os.Chmod(a.cfg.PGData, 0o700)
	}
	if err == nil {
		err = writeStandbySignal(a.cfg.PGData)
	}
	if err != nil {
		err = fmt.Errorf("cloning %s:%d: %w", a.cfg.PrimaryHost, a.cfg.PrimaryPort, err)
		a.log.Error(err, "Clone failed: emptying the data directory")
		if rerr := emptyDir(a.cfg.PGData); rerr != nil {
			a.fail(fmt.Errorf("%w; %w", err, rerr))
			return
		}
		a.setState(agentapi.StateWaiting, err.Error())
		return
	}
	a.log.Info("Cloned the primary", "duration", time.Since(start).Round(time.Millisecond))
	if err := a.startServer(agentapi.StateStarting); err != nil {
		a.fail(err)
	}
}

// errorLine is the line of a command's output that says what failed: the
// first PANIC, FATAL or ERROR of a server's log, else the first that says
// "error", else the last; from its severity on (a log line's prefix, such
// as its timestamp, says nothing of the cause).
func errorLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, sev := range []string{"PANIC:", "FATAL:", "ERROR:"} {
		for _, l := range lines {
			if i := strings.Index(l, sev); i >= 0 {
				return l[i:]
			}
		}
	}
	for _, l := range lines {
		if strings.Contains(l, "error") {
			return l
		}
	}
	return lines[len(lines)-1]
}

// bootstrapFailed records a failed bootstrap: the agent waits again, and
// says why and when it takes the next.
func (a *Agent) bootstrapFailed(msg string) {
	a.mu.Lock()
	a.bootstrapFailures++
	a.bootstrapFailedAt = time.Now()
	wait := recoveryRetryDelay(a.bootstrapFailures)
	a.state, a.message = agentapi.StateWaiting, fmt.Sprintf("%s (failure %d in a row; the next attempt in %s at the earliest)", msg, a.bootstrapFailures, wait)
	a.mu.Unlock()
}

// bootstrapBackoff is how long a bootstrap asked for at now must still
// wait after the last failed one, and why; 0 when it may run.
func (a *Agent) bootstrapBackoff(now time.Time) (time.Duration, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.bootstrapFailures == 0 {
		return 0, ""
	}
	wait := a.bootstrapFailedAt.Add(recoveryRetryDelay(a.bootstrapFailures)).Sub(now)
	if wait <= 0 {
		return 0, ""
	}
	return wait, fmt.Sprintf("the last bootstrap failed %s ago (%s)", now.Sub(a.bootstrapFailedAt).Round(time.Second), a.message)
}
