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
