package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// otherPrimary names the instance that runs as the Database's primary when
// another instance certainly does, and says why not ("" and the reason)
// otherwise. It is what an agent checks before it empties a data
// directory that holds a cluster (reclone) other than after a completed
// rewind: a rewind that keeps failing (rewindFailed), a standby whose WAL
// is gone from the primary (recloneWhenWALGone).
//
// The argument. A data directory may be emptied only when it cannot hold
// the only copy of anything the Database still has. Three facts make
// another instance the keeper of the Database's whole history:
//
//   - the primary lease, read just now, names another holder (neither
//     this pod nor an earlier pod of its name, whose server could run on
//     this very volume);
//   - this agent saw that holder renew it, the last time less than
//     LeaseRenewDeadline ago: a holder that cannot renew for that long
//     fences itself (stops its server), so a renewing holder runs its
//     server as the only primary;
//   - the read-write Service (PrimaryHost, which selects the holder's pod)
//     answers as a server out of recovery whose system identifier is this
//     data directory's: the same cluster, a primary, now.
//
// What this data directory has beyond that primary's history is WAL of
// an earlier primary that a failover gave up (the transactions pg_rewind
// would discard, which the rewind report counts first) or, on a standby,
// nothing at all. Without a lease (a pod made before issue 19), with the
// API server out of reach, a released lease, a holder that stopped
// renewing, or a Service that answers with no primary, this data
// directory may be the newest copy (its primary lost with its volume,
// this instance the one a failover would promote): it is kept, and the
// caller tries again later.
func (a *Agent) otherPrimary(ctx context.Context) (string, string) {
	if a.keeper == nil {
		return "", "this instance has no primary lease to tell who is the primary"
	}
	if _, err := a.keeper.read(ctx); err != nil {
		return "", err.Error()
	}
	obs := a.keeper.observation()
	holder := obs.Record.Holder
	switch {
	case holder == "":
		return "", "the primary lease is released: no instance is the primary"
	case holder == a.cfg.Pod:
		return "", "the primary lease names this instance"
	case !obs.Since.After(obs.First):
		return "", fmt.Sprintf("this agent has not yet seen %s renew the primary lease", holder)
	}
	if d := obs.unchangedFor(time.Now()); d >= agentapi.LeaseRenewDeadline {
		return "", fmt.Sprintf("%s has not renewed the primary lease for %s", holder, d.Round(time.Second))
	}
	cd, err := a.controlData(ctx)
	if err != nil {
		return "", err.Error()
	}
	own := cd["Database system identifier"]
	recovery, id, err := a.queryPrimaryHost(ctx)
	if err != nil {
		return "", fmt.Sprintf("asking %s whether it runs as the primary: %v", a.cfg.PrimaryHost, err)
	}
	if recovery {
		return "", fmt.Sprintf("%s answers as a standby", a.cfg.PrimaryHost)
	}
	if id != own {
		return "", fmt.Sprintf("%s is another cluster (system identifier %s, this one's %s)", a.cfg.PrimaryHost, id, own)
	}
	return holder, ""
}

// queryPrimaryHost asks the server behind PrimaryHost, as the replication
// role (as pg_rewind connects), whether it is in recovery and its system
// identifier.
func (a *Agent) queryPrimaryHost(ctx context.Context) (recovery bool, systemID string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*connectTimeout)
	defer cancel()
	c, err := a.connectPrimaryHost(ctx)
	if err != nil {
		return false, "", err
	}
	defer c.Close(context.Background())
	err = c.QueryRow(ctx, "SELECT pg_is_in_recovery(), (SELECT system_identifier::text FROM pg_control_system())").Scan(&recovery, &systemID)
	return recovery, systemID, err
}

// connectPrimaryHost connects to the server behind PrimaryHost as the
// replication role.
func (a *Agent) connectPrimaryHost(ctx context.Context) (*pgx.Conn, error) {
	ci := fmt.Sprintf("host=%s port=%d user=%s passfile=%s dbname=postgres application_name=%s connect_timeout=%d",
		conninfoValue(a.cfg.PrimaryHost), a.cfg.PrimaryPort, agentapi.ReplicationUser, conninfoValue(a.pgpass),
		conninfoValue(a.cfg.Pod+"-check"), int(connectTimeout/time.Second))
	cfg, err := pgx.ParseConfig(ci + a.sslConninfo())
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, cfg)
}
