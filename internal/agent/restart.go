package agent

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// restartPoll is how often a restart looks whether the server accepts
// connections again.
const restartPoll = 200 * time.Millisecond

// handleRestart answers POST RestartPath.
func (a *Agent) handleRestart(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := a.requestContext(r)
	defer cancel()
	s, err := a.restart(ctx)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

// restart restarts a running server that accepts connections in place,
// with the role it has, for a setting that only a start applies (a
// lowered max_connections: PostgreSQL needs the primary restarted with it
// before its standbys): a CHECKPOINT (the shutdown checkpoint, a
// standby's shutdown restartpoint, is then short), a fast shutdown
// (stopServer), and the start a restart of the container would make
// (startInPlace): a primary's through startPrimary, which finds the lease
// naming it, takes it (a renew) and starts; a standby's with its
// standby.signal and its floor settings read anew (standbyFloorArgs). It
// is an ordinary start: one that fails with settings changed since the
// last start has them put back and starts again (putBackLastStarted). It
// answers the status once the server accepts connections again with the
// same role, or an error when ctx ends first (the start goes on: see the
// status).
//
// A primary keeps the primary lease throughout: nothing releases it, and
// the keeper renews a lease it holds whether the server runs or not
// (leaseKeeper.run looks at nothing but its holding), so the server's
// time down is no renewal missed. Only a primary whose lease is held and
// renewed restarts: one serving in failsafe could not take its lease to
// start again before the API server answers. A fence meanwhile (the lease
// lost) takes its course: the restart then starts nothing and answers an
// error, and the rejoin the fence began (rejoinWhenLost) runs once the
// restart let go of a.op.
func (a *Agent) restart(ctx context.Context) (agentapi.Status, error) {
	if !a.op.TryLock() {
		return agentapi.Status{}, errBusy
	}
	locked := true
	defer func() {
		if locked {
			a.op.Unlock()
		}
	}()
	s := a.status(ctx)
	role := agentapi.RolePrimary
	if isStandby(a.cfg.PGData) {
		role = agentapi.RoleReplica
	}
	if s.State != agentapi.StateRunning || !s.Ready || s.Recovering || s.Role != role {
		return agentapi.Status{}, conflict("not a running server that accepts connections (state %s, role %q, recovering %t)", s.State, s.Role, s.Recovering)
	}
	if role == agentapi.RolePrimary && s.Lease != nil && (!s.Lease.Held || s.Lease.Failsafe) {
		why := "it does not hold the primary lease"
		if s.Lease.Failsafe {
			why = "it serves in failsafe: it could not take its lease to start again until the API server answers"
		}
		return agentapi.Status{}, conflict("not restarting the primary: %s", why)
	}
	a.log.Info("Restarting the server in place", "role", role)
	if err := a.exec(ctx, "CHECKPOINT"); err != nil {
		return agentapi.Status{}, fmt.Errorf("restarting in place: %w (the server runs on)", err)
	}
	a.mu.Lock()
	fencedAt := a.fencedAt
	up := a.srv != nil && a.state == agentapi.StateRunning
	if up {
		a.state, a.message = agentapi.StateStarting, "restarting in place"
	}
	state := a.state
	a.mu.Unlock()
	if !up {
		return agentapi.Status{}, conflict("not restarting: the server stopped meanwhile (state %s)", state)
	}
	if err := a.stopServer(ctx); err != nil {
		a.fail(err)
		return agentapi.Status{}, fmt.Errorf("restarting in place: %w", err)
	}
	// the server stopped otherwise meanwhile: a fence (rejoinWhenLost
	// follows it), or an exit on its own (the agent fails).
	a.mu.Lock()
	state, msg := a.state, a.message
	fenced := !a.fencedAt.Equal(fencedAt)
	a.mu.Unlock()
	if fenced || state != agentapi.StateStarting {
		return agentapi.Status{}, fmt.Errorf("restarting in place: the server stopped otherwise meanwhile, not starting it (state %s: %s)", state, msg)
	}
	// the start, in the background: startPrimary waits for the lease when
	// it cannot read it; the request waits within ctx.
	locked = false
	go func() {
		defer a.op.Unlock()
		a.startInPlace()
	}()
	return a.awaitRestart(ctx, role)
}

// awaitRestart waits until the server a restart started accepts
// connections with role and answers its status; an error when the agent
// leaves Starting otherwise (it failed, or was fenced) or ctx ends.
func (a *Agent) awaitRestart(ctx context.Context, role agentapi.Role) (agentapi.Status, error) {
	for {
		a.mu.Lock()
		state, msg, up := a.state, a.message, a.srv != nil
		a.mu.Unlock()
		switch state {
		case agentapi.StateStarting:
		case agentapi.StateRunning:
			if s := a.status(ctx); up && s.State == agentapi.StateRunning && s.Ready {
				if s.Role != role {
					return agentapi.Status{}, fmt.Errorf("restarting in place: the server started again as a %s, not a %s", s.Role, role)
				}
				a.log.Info("Restarted the server in place", "role", role)
				return s, nil
			}
		default:
			return agentapi.Status{}, fmt.Errorf("restarting in place: the server did not start again (state %s: %s)", state, msg)
		}
		select {
		case <-ctx.Done():
			return agentapi.Status{}, fmt.Errorf("restarting in place: %w (the start goes on: see the status)", ctx.Err())
		case <-time.After(restartPoll):
		}
	}
}
