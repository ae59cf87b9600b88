// Package agent is dbkeeper's in-pod instance agent. The agent
// (`manager agent`, the manager binary copied into the engine pod by an
// init container running `manager copy-self`) is PID 1 of the engine
// container: it owns the postmaster, bootstraps an empty data directory
// when the operator says how (initdb for the first primary, pg_basebackup
// for a standby), serves an authenticated status endpoint, and carries out
// the operator's demote and promote. The operator decides; the agent
// enforces (docs/design/replication.md). Its contract with the manager,
// the HTTP API's types and client, environment, files and ports, is
// package agentapi.
package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// Main runs the agent until SIGTERM or SIGINT, which stop the server and
// return nil; it returns an error when the server exits on its own (the
// kubelet then restarts the container), except during a restore's
// recovery, whose server it starts again itself (recoveryExited).
func Main(cfg Config, log logr.Logger) (err error) {
	if cfg.CheckTakeover {
		return checkTakeover(cfg, os.Stdout)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	// every line names the instance, as the server's JSON lines do
	log = log.WithName("agent").WithValues(cfg.LogValues()...)
	defer func() {
		if err != nil {
			log.Error(err, "The agent exits")
		}
	}()
	a := newAgent(ctx, cfg, log)
	go readExecutableSum(log)
	a.loadRefusedStarts()
	// a server a former agent of this process runs, to adopt
	h := a.takeHandover()
	if a.keeper, err = newLeaseKeeper(cfg, log); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if a.keeper != nil {
		a.keeper.onFence = a.fence
		if h != nil && h.Lease != nil {
			a.keeper.continueHolding(h.Lease)
		}
		// the lease outlives the agent's context: a SIGTERM stops the
		// server first, renewing meanwhile, then releases it.
		leaseCtx, leaseCancel := context.WithCancel(context.Background())
		defer leaseCancel()
		go a.keeper.run(leaseCtx)
		go a.keeper.watchdog(leaseCtx)
	}
	go a.reaper.run(ctx)
	go a.watchCerts(ctx)
	go a.watchWALGone(ctx)

	if a.pgpass, err = writePgpass(cfg.ReplicationPassword); err != nil {
		return err
	}
	defer os.Remove(a.pgpass)
	var keep string
	if h != nil {
		keep = h.RuntimeDir
	}
	if err := a.setUpArchive(ctx, keep); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	svc := &services{a: a, ctx: ctx}
	if err := svc.start(); err != nil {
		return err
	}
	log.Info("Starting the agent", "listen", svc.hs.Addr, "pgdata", cfg.PGData, "tls", cfg.TLSDir != "", "apiTLS", cfg.apiTLSDir() != "", "version", agentapi.Version())

	a.beginOrAdopt(h)

	for {
		var runErr error
		select {
		case <-ctx.Done():
			log.Info("Shutting down")
		case runErr = <-a.fatal:
		case runErr = <-svc.httpErr:
		case t := <-a.takeovers:
			svc.stop()
			log.Error(a.handOver(t), "The switch to the new binary failed: the agent goes on")
			if err := svc.start(); err != nil {
				runErr = err
				break
			}
			continue
		}
		return a.shutDown(runErr, svc.hs, svc.stopBackupServer, svc.backupServerDone)
	}
}

// beginOrAdopt adopts the server of handover h (when set and it can),
// else begins as after any start.
func (a *Agent) beginOrAdopt(h *handover) {
	if h != nil {
		a.op.Lock()
		err := a.adopt(h)
		if err == nil {
			return
		}
		a.op.Unlock()
		closeFDs(h.CollectorFDs)
		path, _ := handoverPaths(a.self)
		if p := os.Getenv(agentapi.EnvHandover); p != "" {
			path = p
		}
		a.ignoreHandover(path, err.Error())
	}
	a.begin()
}

// services are what the agent serves besides the server: its endpoint and
// the backup server; a takeover stops them and, when it fails, starts
// them again.
type services struct {
	a   *Agent
	ctx context.Context
	hs  *http.Server
	// httpErr receives the endpoint's end.
	httpErr          chan error
	stopBackupServer context.CancelFunc
	backupServerDone chan struct{}
}

// start starts the backup server and the endpoint.
func (s *services) start() error {
	// pgBackRest's TLS server stops once the agent stops.
	backupServerCtx, stop := context.WithCancel(s.ctx)
	s.stopBackupServer, s.backupServerDone = stop, make(chan struct{})
	go s.a.runBackupServer(backupServerCtx, s.backupServerDone)
	hs, err := s.a.listen()
	if err != nil {
		stop()
		return err
	}
	s.hs, s.httpErr = hs, make(chan error, 1)
	go func() { s.httpErr <- s.a.serve(hs) }()
	return nil
}

// stop stops the backup server and then the endpoint, once the answers
// being written are sent.
func (s *services) stop() {
	s.stopBackupServer()
	select {
	case <-s.backupServerDone:
	case <-time.After(backupServerStopGrace + time.Second):
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.hs.Shutdown(ctx)
	<-s.httpErr
}

// shutDown stops the agent after runErr (nil: a signal): the server, then
// (when the agent stopped it and held the lease) the lease, the backup
// server and the endpoint hs. It returns runErr, or why the stop failed.
func (a *Agent) shutDown(runErr error, hs *http.Server, stopBackupServer context.CancelFunc, backupServerDone <-chan struct{}) error {
	log := a.log
	a.mu.Lock()
	a.stopping = true
	a.mu.Unlock()
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer stopCancel()
	if err := a.stopServer(stopCtx); err != nil && runErr == nil {
		runErr = err
	}
	// the server's last lines reach the container's log
	a.mu.Lock()
	last := a.lastOutput
	a.mu.Unlock()
	if last != nil {
		last.flushed(outputDrain)
	}
	// a clone that was cut short empties the data directory before the
	// agent exits.
	opDone := make(chan struct{})
	go func() { a.op.Lock(); close(opDone) }()
	select {
	case <-opDone:
	case <-stopCtx.Done():
	}
	// a server that crashed restarts in place as the same holder: only a
	// stop the agent asked for releases the lease, once the server is down.
	if a.keeper != nil && runErr == nil && a.keeper.holds() {
		if err := a.stopServer(stopCtx); err != nil {
			runErr = err
		} else if err := a.keeper.release(stopCtx); err != nil {
			log.Error(err, "Cannot release the primary lease: another instance takes it over once it expires")
		}
	}
	stopBackupServer()
	select {
	case <-backupServerDone:
	case <-time.After(backupServerStopGrace + time.Second):
	}
	shutCtx, shutCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer shutCancel()
	if err := hs.Shutdown(shutCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error(err, "Stopping the endpoint")
	}
	if runErr != nil {
		return fmt.Errorf("agent: %w", runErr)
	}
	log.Info("Stopped")
	return nil
}

// begin starts the server of a data directory that holds a cluster (one
// that would start as a primary only once the agent holds the primary
// lease, see startPrimary), or waits for a bootstrap request when it is
// empty.
func (a *Agent) begin() {
	if err := finishSwap(a.upgradeFiles()); err != nil {
		a.fail(err)
		return
	}
	if hasCluster(a.cfg.PGData) {
		// standby.signal is written back only after a rejoin's rewind, and
		// a standby fenced while promoting never wrote as a primary: a
		// standby either way.
		if isStandby(a.cfg.PGData) {
			if err := a.clearFenced(); err != nil {
				a.fail(err)
				return
			}
		}
		if a.oldMajorStandby() {
			a.setState(agentapi.StateStarting, "asking the primary which major it runs")
			go a.underOp(a.startOldMajorStandby)
			return
		}
		if a.keeper != nil && !isStandby(a.cfg.PGData) {
			a.setState(agentapi.StateStarting, "reading the primary lease")
			go a.underOp(a.startPrimary)
			return
		}
		if err := a.startServer(agentapi.StateStarting); err != nil {
			a.fail(err)
		}
		return
	}
	empty, err := isEmpty(a.cfg.PGData)
	switch {
	case err != nil:
		a.setState(agentapi.StateFailed, err.Error())
	case !empty:
		a.setState(agentapi.StateFailed, "the data directory is not empty and holds no cluster: it needs a person")
	default:
		a.log.Info("The data directory is empty: waiting for a bootstrap request")
		a.setState(agentapi.StateWaiting, "")
	}
}

// underOp runs f holding a.op.
func (a *Agent) underOp(f func()) {
	a.op.Lock()
	defer a.op.Unlock()
	f()
}
