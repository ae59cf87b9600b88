package agent

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// Agent owns the postmaster and carries out the operator's requests.
type Agent struct {
	cfg    Config
	log    logr.Logger
	reaper *reaper
	// ready is the readiness check of /readyz, shared by the probes.
	ready *sharedCheck
	// pgpass is ReplicationUser's password file, for streaming and cloning.
	pgpass string
	// ctx ends when the agent shuts down; bootstraps run under it.
	ctx context.Context

	// op is held by the one bootstrap, demote, promote or restart that
	// runs; others are refused.
	op sync.Mutex
	// parameters is held by the one parameters request that runs; others
	// wait for it.
	parameters sync.Mutex
	// refused (under refusedMu) are the values the server did not start
	// with, which the agent put back (putBackLastStarted) and does not
	// write again while they are asked for (refusedStarts); kept in
	// refusedStartsPath too.
	refusedMu sync.Mutex
	refused   []refusedStart

	mu       sync.Mutex
	state    agentapi.State
	message  string
	srv      *server
	stopping bool
	// fatal receives the reason the agent must exit: the postmaster
	// exited on its own, or could not be started again.
	fatal chan error
	// keeper holds the primary lease; nil without one (EnvLeaseName).
	keeper *leaseKeeper
	// promoting says a promote runs (a second failover promote is
	// accepted, not refused).
	promoting bool
	// fencedAt is when the agent last fenced its server.
	fencedAt time.Time
	// archive archives WAL and takes base backups; nil without a
	// Repository.
	archive *archiver
	// runtimeDir holds pgBackRest's configurations and logs, with a
	// Repository or a Recovery.
	runtimeDir string
	// recoveryExits counts the exits of the server during a restore's
	// recovery (recoveryExited): each one waits longer to start again.
	recoveryExits int
	// rewindFailures (under op) counts the rejoins in a row whose
	// pg_rewind failed (rewindFailed).
	rewindFailures int
	// bootstrapFailures (under mu) counts the bootstraps in a row that
	// failed, the last at bootstrapFailedAt: the next waits
	// recoveryRetryDelay(bootstrapFailures) after it (bootstrapBackoff).
	bootstrapFailures int
	bootstrapFailedAt time.Time
	// major is the server's major version once read (serverMajor).
	major atomic.Int32
	// lastOutput (under mu) is the output of the server last started,
	// whose last lines the agent writes before it exits.
	lastOutput *outputTail

	// self is the agent's binary as it started (a takeover renames it);
	// empty when unknown: no takeover then.
	self string
	// execve replaces the process (syscall.Exec; tests fake it).
	execve func(path string, argv, envv []string) error
	// takeoverMu is held while a new binary is received and checked;
	// takeovers hands Main the installed one to switch to.
	takeoverMu sync.Mutex
	takeovers  chan takeover
	// lastTakeover (under mu) is how this agent came to run after an
	// in-place takeover, or how its last attempt failed.
	lastTakeover *agentapi.TakeoverReport
}

// newAgent returns an agent for cfg.
func newAgent(ctx context.Context, cfg Config, log logr.Logger) *Agent {
	a := &Agent{cfg: cfg, log: log, reaper: newReaper(), ctx: ctx, fatal: make(chan error, 1),
		execve: syscall.Exec, takeovers: make(chan takeover, 1)}
	if self, err := os.Executable(); err == nil {
		a.self = self
	}
	a.ready = &sharedCheck{fresh: readyFresh, check: a.ping}
	return a
}

func (a *Agent) setState(s agentapi.State, msg string) {
	a.mu.Lock()
	a.state, a.message = s, msg
	a.mu.Unlock()
}

func (a *Agent) fail(err error) {
	a.setState(agentapi.StateFailed, err.Error())
	select {
	case a.fatal <- err:
	default:
	}
}
