package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// opError is a refusal or failure with the HTTP status to answer.
type opError struct {
	code int
	msg  string
}

func (e *opError) Error() string { return e.msg }

func conflict(format string, args ...any) error {
	return &opError{code: http.StatusConflict, msg: fmt.Sprintf(format, args...)}
}

// errBusy refuses a request while another operation runs.
var errBusy = &opError{code: http.StatusConflict, msg: "another bootstrap, demote or promote is running"}

// status is the instance's status: from the server when it answers, else
// from the data directory.
func (a *Agent) status(ctx context.Context) Status {
	a.mu.Lock()
	s := Status{Pod: a.cfg.Pod, State: a.state, Message: a.message}
	pid := 0
	if a.srv != nil {
		pid = a.srv.cmd.Process.Pid
	}
	a.mu.Unlock()
	// initdb's temporary server answers on the same socket: only the
	// server the agent runs says the instance's status.
	if pid != 0 && postmasterPID(a.cfg.PGData) == pid {
		q := s
		if err := a.queryStatus(ctx, &q); err == nil {
			return q
		}
	}
	a.diskStatus(ctx, &s)
	return s
}

// bootstrap fills an empty data directory as req says; the work goes on
// after the answer.
func (a *Agent) bootstrap(req BootstrapRequest) error {
	if req.Mode != BootstrapInitdb && req.Mode != BootstrapClone {
		return &opError{code: http.StatusBadRequest, msg: fmt.Sprintf("unknown bootstrap mode %q", req.Mode)}
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
	if !empty || state != StateWaiting {
		a.op.Unlock()
		return conflict("the data directory is not empty (state %s): bootstrap only fills an empty one", state)
	}
	a.log.Info("Bootstrapping", "mode", req.Mode)
	if req.Mode == BootstrapInitdb {
		defer a.op.Unlock()
		// the image's entrypoint runs initdb, then the server.
		if err := a.startServer(StateBootstrapping); err != nil {
			a.setState(StateWaiting, err.Error())
			return err
		}
		return nil
	}
	a.setState(StateBootstrapping, "")
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
		"-h", a.cfg.PrimaryHost, "-p", strconv.Itoa(a.cfg.PrimaryPort), "-U", ReplicationUser,
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
		a.setState(StateWaiting, err.Error())
		return
	}
	a.log.Info("Cloned the primary", "duration", time.Since(start).Round(time.Millisecond))
	if err := a.startServer(StateStarting); err != nil {
		a.fail(err)
	}
}

// demote stops a running primary (fast shutdown) and restarts it as a
// standby of EnvPrimaryHost; it answers the shutdown checkpoint's LSN.
func (a *Agent) demote(ctx context.Context) (DemoteResponse, error) {
	if !a.op.TryLock() {
		return DemoteResponse{}, errBusy
	}
	defer a.op.Unlock()
	if s := a.status(ctx); s.State != StateRunning || !s.Ready || s.Role != RolePrimary {
		return DemoteResponse{}, conflict("not a running primary (state %s, role %q)", s.State, s.Role)
	}
	a.log.Info("Demoting")
	a.setState(StateDemoting, "")
	// a checkpoint first makes the shutdown checkpoint short.
	if err := a.exec(ctx, "CHECKPOINT"); err != nil {
		a.setState(StateRunning, err.Error())
		return DemoteResponse{}, err
	}
	if err := a.stopServer(ctx); err != nil {
		a.fail(err)
		return DemoteResponse{}, err
	}
	cd, err := a.controlData(ctx)
	if err == nil {
		err = writeStandbySignal(a.cfg.PGData)
	}
	if err == nil {
		err = a.startServer(StateStarting)
	}
	if err != nil {
		a.fail(err)
		return DemoteResponse{}, err
	}
	lsn := cd["Latest checkpoint location"]
	a.log.Info("Demoted: restarting as a standby", "shutdownLSN", lsn)
	return DemoteResponse{ShutdownLSN: lsn, Status: a.status(ctx)}, nil
}

// promote promotes a running standby that replayed at least
// req.MinReplayedLSN, and answers once it accepts writes.
func (a *Agent) promote(ctx context.Context, req PromoteRequest) (Status, error) {
	if !a.op.TryLock() {
		return Status{}, errBusy
	}
	defer a.op.Unlock()
	s := a.status(ctx)
	if s.State != StateRunning || !s.Ready || s.Role != RoleReplica {
		return Status{}, conflict("not a running standby (state %s, role %q)", s.State, s.Role)
	}
	if req.MinReplayedLSN != "" {
		c, err := a.connect(ctx)
		if err != nil {
			return Status{}, err
		}
		var caughtUp bool
		err = c.QueryRow(ctx, "SELECT COALESCE(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)", req.MinReplayedLSN).Scan(&caughtUp)
		c.Close(context.Background())
		if err != nil {
			return Status{}, &opError{code: http.StatusBadRequest, msg: fmt.Sprintf("comparing with minReplayedLSN %q: %v", req.MinReplayedLSN, err)}
		}
		if !caughtUp {
			return Status{}, conflict("replayed up to %s, short of %s", s.ReplayedLSN, req.MinReplayedLSN)
		}
	}
	a.log.Info("Promoting", "replayedLSN", s.ReplayedLSN)
	a.setState(StatePromoting, "")
	c, err := a.connect(ctx)
	if err != nil {
		a.setState(StateRunning, err.Error())
		return Status{}, err
	}
	var promoted bool
	err = c.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&promoted)
	c.Close(context.Background())
	if err == nil && !promoted {
		err = errors.New("pg_promote did not finish within 60s")
	}
	if err != nil {
		a.setState(StateRunning, err.Error())
		return Status{}, fmt.Errorf("promoting: %w", err)
	}
	for {
		a.setState(StateRunning, "")
		if s = a.status(ctx); s.Role == RolePrimary {
			a.log.Info("Promoted", "timeline", s.Timeline)
			return s, nil
		}
		select {
		case <-ctx.Done():
			return Status{}, fmt.Errorf("promoting: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// errorLine is the line of a command's output that says what failed: the
// first that says "error", else the last.
func errorLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, l := range lines {
		if strings.Contains(l, "error") {
			return l
		}
	}
	return lines[len(lines)-1]
}
