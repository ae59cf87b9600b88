package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// server is one run of the image's command.
type server struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once it exited
	// expected, under Agent.mu, says the agent stopped it.
	expected bool
	// accepted, under Agent.mu, says it accepted connections: it started.
	accepted bool
	// output is the end of what it wrote.
	output *outputTail
}

// startServer runs the image's command (which runs initdb first on an
// empty data directory) and watches it: once it accepts connections the
// state is Running; if it exits without the agent asking, the agent fails
// (during a restore's recovery it starts it again later, recoveryExited).
func (a *Agent) startServer(state agentapi.State) error {
	if a.cfg.TLSDir == "" && hasCluster(a.cfg.PGData) {
		if _, err := ensureReplicationHBA(a.cfg.PGData); err != nil {
			return err
		}
	}
	if err := a.writeCertAuth(); err != nil {
		return err
	}
	// a data directory that starts a primary (or initdb's) needs the lease.
	if a.keeper != nil && !isStandby(a.cfg.PGData) && !a.keeper.holds() {
		return errors.New("not starting as a primary: this instance does not hold the primary lease")
	}
	if isStandby(a.cfg.PGData) {
		dropped, err := dropStandbySlots(a.cfg.PGData)
		if err != nil {
			return err
		}
		if len(dropped) > 0 {
			a.log.Info("Dropped the slots this instance kept as a primary", "slots", dropped)
		}
	}
	a.mu.Lock()
	running := a.srv != nil
	a.mu.Unlock()
	if running {
		return errors.New("the server already runs")
	}
	if err := a.clearStalePidFile(); err != nil {
		return err
	}
	args := a.serverArgs()
	// PostgreSQL 15 and later log JSON through their logging collector
	// (serverlog.go); older ones text to stderr.
	var env *envelope
	col := a.newServerCollector()
	if col != nil {
		args = append(args, collectorArgs(col.dir)...)
		e := a.logEnvelope()
		env = &e
	}
	oldEnv, err := a.oldEngineEnv()
	if err != nil {
		return err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(append(os.Environ(), "PGPORT="+strconv.Itoa(a.cfg.Port)), oldEnv...)
	output, err := teeServerOutput(cmd, os.Stdout, os.Stderr, env, col)
	if err != nil {
		return err
	}
	// the server has its own ends of the pipes once it started.
	defer output.closeWriters()
	started := false
	defer func() {
		if !started {
			output.serverExited()
		}
	}()
	// its own process group, so that a stop before the entrypoint execs
	// the server reaches initdb too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	srv := &server{cmd: cmd, done: make(chan struct{}), output: output}

	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopping {
		return errors.New("the agent is shutting down")
	}
	if a.srv != nil {
		return errors.New("the server already runs")
	}
	if err := a.reaper.start(cmd); err != nil {
		return fmt.Errorf("starting %s: %w", args[0], err)
	}
	started = true
	a.log.Info("Started the server", "pid", cmd.Process.Pid, "standby", isStandby(a.cfg.PGData), "jsonLog", col != nil)
	a.srv, a.state, a.message, a.lastOutput = srv, state, "", output
	go a.watchExit(srv)
	go a.watchReady(srv)
	return nil
}

// watchExit waits for srv's exit; one the agent did not ask for fails it,
// unless srv failed to start with settings changed since the last start,
// which the agent puts back before it starts srv again
// (putBackLastStarted), or a restore's recovery has not finished
// (recoveryExited).
func (a *Agent) watchExit(srv *server) {
	err := a.reaper.wait(srv.cmd)
	// before another start makes the log pipes again
	srv.output.serverExited()
	a.mu.Lock()
	a.srv = nil
	expected, accepted := srv.expected, srv.accepted
	a.mu.Unlock()
	close(srv.done)
	if expected {
		a.log.Info("The server stopped", "exit", fmt.Sprint(err))
		return
	}
	if err == nil {
		err = errors.New("exit status 0")
	}
	if !accepted && a.putBackLastStarted(srv.output.lines(outputDrain), err) {
		go a.startAgain()
		return
	}
	if a.recovering() {
		a.recoveryExited(srv, err)
		return
	}
	// its last PANIC or FATAL says why, in the agent's status and in the
	// container's termination message (the agent exits with it)
	line := exitLine(srv.output.lines(outputDrain))
	a.log.Error(err, "The server exited on its own", "reason", line)
	if line != "" {
		err = fmt.Errorf("%w: %s", err, line)
	}
	a.fail(fmt.Errorf("the server exited: %w", err))
}

// watchReady marks the agent Running once srv accepts connections, after
// keeping the postgresql.auto.conf it started with (saveLastStarted), and
// then makes sure its hba file lets standbys stream (the entrypoint's
// initdb wrote it after the agent last could).
func (a *Agent) watchReady(srv *server) {
	for {
		select {
		case <-srv.done:
			return
		case <-time.After(200 * time.Millisecond):
		}
		// the entrypoint execs the server: until the postmaster is srv's
		// own process, what answers is initdb's temporary server.
		if postmasterPID(a.cfg.PGData) != srv.cmd.Process.Pid || a.ping(a.ctx) != nil {
			continue
		}
		// before Running: a parameters request writes the file only then.
		a.saveLastStarted()
		a.mu.Lock()
		srv.accepted = true
		if a.srv == srv && (a.state == agentapi.StateStarting || a.state == agentapi.StateBootstrapping) {
			a.state, a.message = agentapi.StateRunning, ""
		}
		a.mu.Unlock()
		a.log.Info("The server accepts connections")
		if r := a.upgradeReport(); r != nil && r.Phase == agentapi.UpgradeAnalyzing {
			go a.afterMajorUpgrade()
		}
		a.finishRecovery()
		a.pokeArchive()
		// PostgreSQL's checkpointer, which enforces archive_timeout, first
		// sleeps checkpoint_timeout while the startup process runs and is
		// not woken when it ends: a quiet primary's commits waited up to
		// 5 minutes instead of archive_timeout after every start
		// (TestArchiveTimeoutHoldsAfterARestart). A reload wakes it.
		reload := a.archive != nil
		if a.cfg.TLSDir == "" {
			if changed, err := ensureReplicationHBA(a.cfg.PGData); err != nil {
				a.log.Error(err, "Cannot let standbys stream")
			} else if changed {
				reload = true
			}
		}
		if reload {
			if err := a.exec(a.ctx, "SELECT pg_reload_conf()"); err != nil {
				a.log.Error(err, "Cannot reload the server's configuration")
			}
		}
		return
	}
}

// entrypointGrace is how long a stop waits for the entrypoint's shell
// (initdb, its temporary server, psql) before killing it.
const entrypointGrace = 10 * time.Second

// stopServer fast-shuts the server down (SIGINT: sessions end, committed
// WAL reaches connected standbys) and waits for it. Before the entrypoint
// execs the server, it stops the entrypoint's process group and the
// temporary server (pg_ctl starts it in a session of its own).
func (a *Agent) stopServer(ctx context.Context) error {
	a.mu.Lock()
	srv := a.srv
	if srv == nil {
		a.mu.Unlock()
		return nil
	}
	srv.expected = true
	a.mu.Unlock()
	pid := srv.cmd.Process.Pid
	a.log.Info("Stopping the server", "pid", pid)
	if pm := postmasterPID(a.cfg.PGData); pm != pid {
		return a.stopEntrypoint(ctx, srv, pm)
	}
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stopping the server: %w", err)
	}
	select {
	case <-srv.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stopping the server: %w", ctx.Err())
	}
}

// stopEntrypoint interrupts the entrypoint's group and its temporary
// server pm (0 when none), kills the group if it lingers, and waits for
// both.
func (a *Agent) stopEntrypoint(ctx context.Context, srv *server, pm int) error {
	group := -srv.cmd.Process.Pid
	_ = syscall.Kill(group, syscall.SIGINT)
	if pm > 0 {
		_ = syscall.Kill(pm, syscall.SIGINT)
	}
	select {
	case <-srv.done:
	case <-time.After(entrypointGrace):
		a.log.Info("The entrypoint lingers: killing it")
		_ = syscall.Kill(group, syscall.SIGKILL)
		<-srv.done
	case <-ctx.Done():
		return fmt.Errorf("stopping the entrypoint: %w", ctx.Err())
	}
	// the temporary server may have started meanwhile
	if pm = postmasterPID(a.cfg.PGData); pm > 0 && pm != srv.cmd.Process.Pid {
		_ = syscall.Kill(pm, syscall.SIGINT)
		for syscall.Kill(pm, 0) == nil {
			select {
			case <-ctx.Done():
				return fmt.Errorf("stopping the temporary server: %w", ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}
