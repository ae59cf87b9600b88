package agent

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// detach stops the WAL receiver of a running standby: it ends the
// streaming connection to whatever primary it had (the startup process
// starts a new receiver after wal_retrieve_retry_interval, which connects
// to EnvPrimaryHost: the new primary once the failover labelled it).
func (a *Agent) detach(ctx context.Context) error {
	s := a.status(ctx)
	if s.State != agentapi.StateRunning || s.Role != agentapi.RoleReplica {
		return conflict("not a running standby (state %s, role %q)", s.State, s.Role)
	}
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	var pid int
	if err := c.QueryRow(ctx, "SELECT COALESCE((SELECT pid FROM pg_stat_wal_receiver), 0)").Scan(&pid); err != nil {
		return fmt.Errorf("finding the WAL receiver: %w", err)
	}
	if pid == 0 {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stopping the WAL receiver %d: %w", pid, err)
	}
	a.log.Info("Stopped the WAL receiver", "pid", pid)
	return nil
}

// rejoinStandby stops a standby that does not stream and rejoins the
// lease's holder through pg_rewind (rejoin), in the background: a standby
// that received WAL of the old primary the new one never had cannot
// follow the new timeline ("forked off before the current recovery
// point") until rewound.
func (a *Agent) rejoinStandby(ctx context.Context) error {
	s := a.status(ctx)
	if s.Role != agentapi.RoleReplica || s.WALReceiver == "streaming" {
		return conflict("not a standby that does not stream (role %q, WAL receiver %q)", s.Role, s.WALReceiver)
	}
	if !a.op.TryLock() {
		return errBusy
	}
	a.log.Info("Rejoining the primary through pg_rewind", "timeline", s.Timeline)
	go func() {
		defer a.op.Unlock()
		a.setState(agentapi.StateFenced, "rejoining the primary through pg_rewind: this standby received WAL the primary's history does not have")
		if err := a.stopServer(a.ctx); err != nil {
			a.fail(err)
			return
		}
		a.rejoin()
	}()
	return nil
}
