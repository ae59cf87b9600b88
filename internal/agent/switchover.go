package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

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
	// the server is down: the target may take the lease at once.
	if err == nil && a.keeper != nil {
		if rerr := a.keeper.release(ctx); rerr != nil {
			a.log.Error(rerr, "Cannot release the primary lease: the target takes it over once it expires")
		}
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
// req.MinReplayedLSN, and answers once it accepts writes. With
// req.Failover it answers at once (accepted) and promotes in the
// background; a second failover promote while one runs is accepted too.
func (a *Agent) promote(ctx context.Context, req PromoteRequest) (s Status, accepted bool, err error) {
	if req.Failover {
		a.mu.Lock()
		running := a.promoting
		a.mu.Unlock()
		if running {
			return a.status(ctx), true, nil
		}
	}
	if !a.op.TryLock() {
		return Status{}, false, errBusy
	}
	locked := true
	defer func() {
		if locked {
			a.op.Unlock()
		}
	}()
	s = a.status(ctx)
	if s.State != StateRunning || !s.Ready || s.Role != RoleReplica {
		return Status{}, false, conflict("not a running standby (state %s, role %q)", s.State, s.Role)
	}
	if err := a.caughtUp(ctx, s, req.MinReplayedLSN); err != nil {
		return Status{}, false, err
	}
	a.mu.Lock()
	a.promoting = true
	a.state, a.message = StatePromoting, ""
	a.mu.Unlock()
	if !req.Failover {
		defer a.endPromoting()
		s, err = a.doPromote(ctx, s)
		return s, false, err
	}
	locked = false
	go func() {
		defer a.op.Unlock()
		defer a.endPromoting()
		if _, err := a.doPromote(a.ctx, s); err != nil {
			a.log.Error(err, "Failover promotion failed")
		}
	}()
	return a.status(ctx), true, nil
}

func (a *Agent) endPromoting() {
	a.mu.Lock()
	a.promoting = false
	a.mu.Unlock()
}

// caughtUp refuses (409) a standby that has not replayed up to min.
func (a *Agent) caughtUp(ctx context.Context, s Status, min string) error {
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
// then on, and promotes the server.
func (a *Agent) doPromote(ctx context.Context, s Status) (Status, error) {
	if a.keeper != nil {
		err := a.keeper.acquire(ctx, func(msg string) { a.setState(StatePromoting, msg) })
		if err != nil {
			a.setState(StateRunning, err.Error())
			return Status{}, &opError{code: http.StatusConflict, msg: err.Error()}
		}
	}
	a.log.Info("Promoting", "replayedLSN", s.ReplayedLSN)
	a.setState(StatePromoting, "promoting")
	err := a.pgPromote(ctx)
	if err != nil {
		a.setState(StateRunning, err.Error())
		// a standby that stays one gives the lease back.
		if a.keeper != nil && a.status(ctx).Role == RoleReplica {
			if rerr := a.keeper.release(ctx); rerr != nil {
				a.log.Error(rerr, "Cannot release the primary lease after a failed promotion")
			}
		}
		return Status{}, fmt.Errorf("promoting: %w", err)
	}
	for {
		a.mu.Lock()
		if a.state == StatePromoting {
			a.state, a.message = StateRunning, ""
		}
		a.mu.Unlock()
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

// pgPromote runs pg_promote and waits for it.
func (a *Agent) pgPromote(ctx context.Context) error {
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	var promoted bool
	err = c.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&promoted)
	c.Close(context.Background())
	if err == nil && !promoted {
		err = errors.New("pg_promote did not finish within 60s")
	}
	return err
}
