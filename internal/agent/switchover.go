package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// demote stops a running primary (fast shutdown) and restarts it as a
// standby of EnvPrimaryHost; it answers the shutdown checkpoint's LSN.
func (a *Agent) demote(ctx context.Context) (agentapi.DemoteResponse, error) {
	if !a.op.TryLock() {
		return agentapi.DemoteResponse{}, errBusy
	}
	defer a.op.Unlock()
	if s := a.status(ctx); s.State != agentapi.StateRunning || !s.Ready || s.Role != agentapi.RolePrimary {
		return agentapi.DemoteResponse{}, conflict("not a running primary (state %s, role %q)", s.State, s.Role)
	}
	a.log.Info("Demoting")
	a.setState(agentapi.StateDemoting, "")
	// a checkpoint first makes the shutdown checkpoint short.
	if err := a.exec(ctx, "CHECKPOINT"); err != nil {
		a.setState(agentapi.StateRunning, err.Error())
		return agentapi.DemoteResponse{}, err
	}
	if err := a.stopServer(ctx); err != nil {
		a.fail(err)
		return agentapi.DemoteResponse{}, err
	}
	cd, err := a.controlData(ctx)
	if err == nil {
		err = writeStandbySignal(a.cfg.PGData)
	}
	// the server is down: the target may take the lease at once.
	if err == nil && a.keeper != nil {
		if rerr := a.keeper.release(ctx); rerr != nil {
			a.log.Error(rerr, "Cannot release the primary lease: the target takes it over once it expires")
		}
	}
	if err == nil {
		err = a.startServer(agentapi.StateStarting)
	}
	if err != nil {
		a.fail(err)
		return agentapi.DemoteResponse{}, err
	}
	lsn := cd["Latest checkpoint location"]
	a.log.Info("Demoted: restarting as a standby", "shutdownLSN", lsn)
	return agentapi.DemoteResponse{ShutdownLSN: lsn, Status: a.status(ctx)}, nil
}

// promote promotes a running standby that replayed at least
// req.MinReplayedLSN, and answers once it accepts writes. With
// req.Failover it answers at once (accepted) and promotes in the
// background; a second failover promote while one runs is accepted too.
// Either way the promotion runs in the background, holding a.op: a caller
// that gives up (ctx ends) gets an error, and the promotion is followed to
// its end all the same (doPromote), Promoting in the status meanwhile.
func (a *Agent) promote(ctx context.Context, req agentapi.PromoteRequest) (s agentapi.Status, accepted bool, err error) {
	if req.Failover {
		a.mu.Lock()
		running := a.promoting
		a.mu.Unlock()
		if running {
			return a.status(ctx), true, nil
		}
	}
	if !a.op.TryLock() {
		return agentapi.Status{}, false, errBusy
	}
	locked := true
	defer func() {
		if locked {
			a.op.Unlock()
		}
	}()
	s = a.status(ctx)
	if s.State != agentapi.StateRunning || !s.Ready || s.Role != agentapi.RoleReplica {
		return agentapi.Status{}, false, conflict("not a running standby (state %s, role %q)", s.State, s.Role)
	}
	if err := a.caughtUp(ctx, s, req.MinReplayedLSN); err != nil {
		return agentapi.Status{}, false, err
	}
	a.mu.Lock()
	a.promoting = true
	a.state, a.message = agentapi.StatePromoting, ""
	a.mu.Unlock()
	type result struct {
		s   agentapi.Status
		err error
	}
	done := make(chan result, 1)
	// a switchover's promote takes the lease within the request's time; a
	// failover's waits for it in the background.
	leaseCtx := ctx
	if req.Failover {
		leaseCtx = a.ctx
	}
	before := s
	locked = false
	go func() {
		defer a.op.Unlock()
		defer a.endPromoting()
		after, err := a.doPromote(leaseCtx, before)
		if err != nil && req.Failover {
			a.log.Error(err, "Failover promotion failed")
		}
		done <- result{after, err}
	}()
	if req.Failover {
		return a.status(ctx), true, nil
	}
	select {
	case r := <-done:
		return r.s, false, r.err
	case <-ctx.Done():
		return agentapi.Status{}, false, fmt.Errorf("promoting: %w (the promotion goes on: see the status)", ctx.Err())
	}
}

func (a *Agent) endPromoting() {
	a.mu.Lock()
	a.promoting = false
	a.mu.Unlock()
}

// caughtUp refuses (409) a standby that has not replayed up to min.
func (a *Agent) caughtUp(ctx context.Context, s agentapi.Status, min string) error {
	if min == "" {
		return nil
	}
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	var ok bool
	err = c.QueryRow(ctx, "SELECT COALESCE(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)", min).Scan(&ok)
	c.Close(context.Background())
	if err != nil {
		return &opError{code: http.StatusBadRequest, msg: fmt.Sprintf("comparing with minReplayedLSN %q: %v", min, err)}
	}
	if !ok {
		return conflict("replayed up to %s, short of %s", s.ReplayedLSN, min)
	}
	return nil
}

// doPromote (under a.op) takes the primary lease (a released one at once;
// else once its holder cannot have renewed it for LeaseDuration, waiting
// no longer than LeaseDuration + 2 × LeaseRetryPeriod), renews it from
// then on, and promotes the server. ctx bounds the wait for the lease and
// pg_promote's call; once pg_promote may have been asked, the promotion
// is followed under the agent's own context until the server is out of
// recovery or stopped (followPromotion): a promotion asked for completes
// whether or not pg_promote waited long enough, and a server that
// completes it must hold the lease, renewed, with the watchdog armed.
// The lease goes back only when pg_promote certainly did not ask and the
// server is still in recovery.
func (a *Agent) doPromote(ctx context.Context, s agentapi.Status) (agentapi.Status, error) {
	if a.keeper != nil {
		err := a.keeper.acquire(ctx, func(msg string) { a.setState(agentapi.StatePromoting, msg) })
		if err != nil {
			a.setState(agentapi.StateRunning, err.Error())
			return agentapi.Status{}, &opError{code: http.StatusConflict, msg: err.Error()}
		}
	}
	a.mu.Lock()
	srv := a.srv
	a.mu.Unlock()
	a.log.Info("Promoting", "replayedLSN", s.ReplayedLSN)
	a.setState(agentapi.StatePromoting, "promoting")
	asked, err := a.pgPromote(ctx)
	var recovery bool
	if !asked && (a.queryRow(a.ctx, "SELECT pg_is_in_recovery()", &recovery) != nil || recovery) {
		a.setState(agentapi.StateRunning, err.Error())
		// a standby that stays one gives the lease back (one already out
		// of recovery, "recovery is not in progress", keeps it, below).
		if a.keeper != nil {
			rctx, cancel := context.WithTimeout(a.ctx, 2*leaseRequestTimeout)
			if rerr := a.keeper.release(rctx); rerr != nil {
				a.log.Error(rerr, "Cannot release the primary lease after a failed promotion")
			}
			cancel()
		}
		return agentapi.Status{}, fmt.Errorf("promoting: %w", err)
	}
	if err != nil {
		a.log.Info("The promotion goes on after pg_promote: following it", "pg_promote", err.Error())
		a.setState(agentapi.StatePromoting, fmt.Sprintf("promoting: %v; following the promotion until recovery ends", err))
	}
	if srv == nil {
		return agentapi.Status{}, errors.New("promoting: the server does not run")
	}
	return a.followPromotion(srv)
}

// promotePoll is how often followPromotion asks the server whether it
// left recovery.
const promotePoll = 200 * time.Millisecond

// followPromotion waits, under the agent's context, until srv is out of
// recovery (then the agent runs a primary) or stopped. The lease keeper
// renews meanwhile, so a promotion that outlasts LeaseRenewDeadline keeps
// the lease, and a lost lease fences (stops) srv, which ends the wait.
func (a *Agent) followPromotion(srv *server) (agentapi.Status, error) {
	for {
		var recovery bool
		if err := a.queryRow(a.ctx, "SELECT pg_is_in_recovery()", &recovery); err == nil && !recovery {
			a.mu.Lock()
			if a.state == agentapi.StatePromoting {
				a.state, a.message = agentapi.StateRunning, ""
			}
			a.mu.Unlock()
			s := a.status(a.ctx)
			a.log.Info("Promoted", "timeline", s.Timeline)
			return s, nil
		}
		select {
		case <-srv.done:
			return agentapi.Status{}, errors.New("promoting: the server stopped before it left recovery")
		case <-a.ctx.Done():
			return agentapi.Status{}, fmt.Errorf("promoting: %w", a.ctx.Err())
		case <-time.After(promotePoll):
		}
	}
}

// pgPromote runs pg_promote, waiting up to Config.PromoteTimeout. asked
// says the promotion was (or may have been) asked for, so that it may
// complete whatever err says: pg_promote answered true, or false (it gave
// up waiting, the promotion goes on), or the call failed after it reached
// the server other than with an error the server raised before it
// signalled (an error that cancelled the wait, SQLSTATE class 57, leaves
// it asked). asked is false when the server could not be reached, or
// pg_promote raised an error of its own.
func (a *Agent) pgPromote(ctx context.Context) (asked bool, err error) {
	c, err := a.connect(ctx)
	if err != nil {
		return false, err
	}
	defer c.Close(context.Background())
	var promoted bool
	wait := a.promoteWaitSeconds()
	err = c.QueryRow(ctx, "SELECT pg_promote(true, $1)", wait).Scan(&promoted)
	var pgErr *pgconn.PgError
	switch {
	case err == nil && promoted:
		return true, nil
	case err == nil:
		return true, fmt.Errorf("pg_promote did not finish within %ds", wait)
	case errors.As(err, &pgErr) && !strings.HasPrefix(pgErr.Code, "57"):
		return false, err
	default:
		return true, err
	}
}

// promoteWaitSeconds is Config.PromoteTimeout in whole seconds, at least
// one.
func (a *Agent) promoteWaitSeconds() int {
	return max(int(a.cfg.PromoteTimeout/time.Second), 1)
}
