package agent

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// takeover is a checked and installed binary the agent switches to.
type takeover struct {
	stage binaryStage
	// version is the new binary's.
	version string
}

// binaryReadTimeout bounds the receipt of a new binary (tens of MB).
const binaryReadTimeout = 5 * time.Minute

// handleBinary receives a new agent binary (PUT BinaryPath), checks it
// and installs it, then has Main switch to it (handOver) once the answer
// is sent. A binary not taken is answered 409 and leaves nothing changed.
func (a *Agent) handleBinary(w http.ResponseWriter, r *http.Request) {
	version, sum := r.Header.Get(agentapi.HeaderVersion), strings.ToLower(r.Header.Get(agentapi.HeaderSHA256))
	if version == "" || len(sum) != 64 {
		http.Error(w, "the "+agentapi.HeaderVersion+" and "+agentapi.HeaderSHA256+" headers are required", http.StatusBadRequest)
		return
	}
	if !a.takeoverMu.TryLock() {
		writeError(w, conflict("another binary is being received"))
		return
	}
	defer a.takeoverMu.Unlock()
	if why := a.refuseTakeover(); why != "" {
		writeError(w, conflict("not taking the new binary: %s", why))
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(binaryReadTimeout))
	stage := binaryStage{current: a.self, run: a.reaper.startAndWait}
	if err := stage.receive(http.MaxBytesReader(w, r.Body, agentapi.MaxBinarySize), sum); err != nil {
		a.log.Error(err, "Refused a new binary", "version", version)
		writeError(w, conflict("%s", err))
		return
	}
	ctx, cancel := a.requestContext(r)
	defer cancel()
	if _, err := stage.check(ctx, a.argsPrefix(), a.cfg.Args, os.Environ(), version); err != nil {
		stage.discard()
		a.log.Error(err, "Refused a new binary", "version", version)
		writeError(w, conflict("%s", err))
		return
	}
	// from here on no bootstrap, demote, promote or restart starts: the
	// op lock is the new agent's (or given back if the switch fails).
	if !a.op.TryLock() {
		stage.discard()
		writeError(w, errBusy)
		return
	}
	if why := a.refuseTakeover(); why != "" {
		a.op.Unlock()
		stage.discard()
		writeError(w, conflict("not switching to the new binary: %s", why))
		return
	}
	if err := stage.install(); err != nil {
		a.op.Unlock()
		stage.discard()
		writeError(w, err)
		return
	}
	a.log.Info("Switching to a new binary once the answer is sent", "from", agentapi.Version(), "to", version)
	a.takeovers <- takeover{stage: stage, version: version}
	writeJSON(w, http.StatusAccepted, agentapi.TakeoverAnswer{From: agentapi.Version(), Version: version})
}

// refuseTakeover says why the agent does not replace itself now, "" when
// it may: its server runs, as the postmaster, and no promotion,
// restore's recovery, base backup or failsafe is under way (the manager
// tries again later).
func (a *Agent) refuseTakeover() string {
	if a.self == "" {
		return "the agent does not know its own binary"
	}
	a.mu.Lock()
	state, srv, stopping, promoting := a.state, a.srv, a.stopping, a.promoting
	accepted := srv != nil && srv.accepted
	a.mu.Unlock()
	switch {
	case stopping:
		return "the agent is shutting down"
	case promoting:
		return "a promotion is under way"
	case state != agentapi.StateRunning || !accepted:
		return fmt.Sprintf("the server is not running (%s)", state)
	case postmasterPID(a.cfg.PGData) != srv.cmd.Process.Pid:
		return "the server is not the data directory's postmaster"
	case a.recovering():
		return "a restore's recovery is under way"
	case a.backupRunning():
		return "a base backup is under way"
	case a.keeper != nil && a.keeper.status().Failsafe:
		return "the primary serves on its failsafe"
	}
	return ""
}

// backupRunning says a base backup runs.
func (a *Agent) backupRunning() bool {
	if a.archive == nil {
		return false
	}
	a.archive.mu.Lock()
	defer a.archive.mu.Unlock()
	return a.archive.run != nil && a.archive.run.Finished == nil
}

// argsPrefix is what precedes the agent's own words (Config.Args) in its
// command line, without the program: `agent` for the manager.
func (a *Agent) argsPrefix() []string {
	n := len(os.Args) - len(a.cfg.Args)
	if n < 1 {
		return nil
	}
	return os.Args[1:n]
}

// handOver switches the agent to the binary t installed: it writes the
// handover file and execs it, PID and children kept; the caller stopped
// the endpoint and the backup server. It returns only when the switch
// failed, after putting the former binary back; the caller then resumes.
func (a *Agent) handOver(t takeover) error {
	// a parameters request the endpoint's shutdown did not wait out ends
	// first
	a.parameters.Lock()
	defer a.parameters.Unlock()
	h, srv, err := a.handoverRecord()
	var files []*os.File
	if err == nil {
		files = srv.output.readers
		if h.CollectorDir != "" {
			h.CollectorFDs, err = holdFIFOs(h.CollectorDir)
		}
	}
	if err == nil {
		// what the server writes from here on waits in its pipes
		srv.output.pause(pauseWait)
		err = setCloseOnExec(files, false)
	}
	path, _ := handoverPaths(a.self)
	if err == nil && a.ctx.Err() != nil {
		// a SIGTERM the exec would lose: the agent stops as it is
		err = errors.New("the agent is shutting down")
	}
	if err == nil {
		// the lease as late as can be: the new agent renews at once
		if a.keeper != nil {
			h.Lease = a.keeper.handover()
		}
		err = writeHandover(path, h)
	}
	if err == nil {
		a.log.Info("Handing over to the new binary", "pid", h.PID, "to", t.version)
		// what the exec keeps, the pipes' fds, is all it needs
		err = a.execve(a.self, os.Args, withEnv(os.Environ(), agentapi.EnvHandover, path))
		err = fmt.Errorf("executing the new binary: %w", err)
	}
	_ = setCloseOnExec(files, true)
	closeFDs(h.CollectorFDs)
	if srv != nil && srv.output.paused.Load() {
		a.resumeOutput(srv)
	}
	_ = os.Remove(path)
	if rerr := t.stage.rollback(); rerr != nil {
		err = fmt.Errorf("%w; %w", err, rerr)
	}
	a.op.Unlock()
	a.mu.Lock()
	a.lastTakeover = &agentapi.TakeoverReport{From: agentapi.Version(), At: time.Now(), Message: "the switch to " + t.version + " failed: " + err.Error()}
	a.mu.Unlock()
	return err
}

// handoverRecord is the handover of the running server srv.
func (a *Agent) handoverRecord() (handover, *server, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	srv := a.srv
	if srv == nil || srv.output == nil || len(srv.output.readers) != 2 || a.state != agentapi.StateRunning || a.stopping {
		return handover{}, nil, fmt.Errorf("handing over: the server no longer runs (%s)", a.state)
	}
	fds, err := fdsOf(srv.output.readers)
	if err != nil {
		return handover{}, nil, err
	}
	h := handover{PID: srv.cmd.Process.Pid, Output: fds, State: a.state, Standby: isStandby(a.cfg.PGData),
		Accepted: srv.accepted, RuntimeDir: a.runtimeDir, From: agentapi.Version(), At: time.Now()}
	if c := srv.output.collector; c != nil {
		h.CollectorDir = c.dir
	}
	return h, srv, nil
}

// handover is the lease this keeper holds, for the agent it hands over
// to; nil when it holds none.
func (k *leaseKeeper) handover() *handoverLease {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.holding {
		return nil
	}
	l := &handoverLease{LastRenew: k.lastRenew}
	if k.lease != nil {
		l.ResourceVersion = k.lease.ResourceVersion
	}
	return l
}

// continueHolding makes this keeper (of the agent a takeover started)
// the holder l was, as of its last renew: it renews at once, and fences
// if that renew is too late.
func (k *leaseKeeper) continueHolding(l *handoverLease) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.holding = true
	// l.LastRenew has no monotonic reading: the wall clock says how long ago
	k.lastRenew = k.now().Add(-time.Since(l.LastRenew))
}
