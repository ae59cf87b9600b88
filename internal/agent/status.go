package agent

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// status is the instance's status: from the server when it answers, else
// from the data directory.
func (a *Agent) status(ctx context.Context) agentapi.Status {
	a.mu.Lock()
	s := agentapi.Status{Pod: a.cfg.Pod, State: a.state, Message: a.message,
		Agent: &agentapi.BuildInfo{Version: agentapi.Version(), Level: agentapi.Level, SHA256: buildSum(), LastTakeover: a.lastTakeover}}
	pid := 0
	if a.srv != nil {
		pid = a.srv.cmd.Process.Pid
	}
	a.mu.Unlock()
	if a.keeper != nil {
		s.Lease = a.keeper.status()
	}
	s.LastRewind = a.lastRewind()
	s.DataVersion = dataVersion(a.cfg.PGData)
	s.MajorUpgrade = a.upgradeReport()
	if avail, err := volumeAvailable(filepath.Dir(a.cfg.PGData)); err == nil {
		s.VolumeAvailableBytes, s.VolumeFull = avail, avail < volumeFullBelow
	}
	// initdb's temporary server answers on the same socket: only the
	// server the agent runs says the instance's status.
	s.Recovering = hasRecoverySignal(a.cfg.PGData)
	if pid != 0 && postmasterPID(a.cfg.PGData) == pid {
		q := s
		if err := a.queryStatus(ctx, &q); err == nil {
			q.Archive = a.archiveReport(ctx, q.Role == agentapi.RolePrimary)
			return q
		}
	}
	a.diskStatus(ctx, &s)
	s.Archive = a.archiveReport(ctx, false)
	return s
}

// queryTimeout bounds one status query (the server is local).
const queryTimeout = 5 * time.Second

// untracked keeps the agent's own connections out of pg_stat_statements
// (a superuser's setting, which the agent is; a placeholder where the
// library is not loaded), so that an idle server's top statements are not
// the agent's status checks and scrapes.
var untracked = map[string]string{"pg_stat_statements.track": "none"}

// connect opens a connection to the local server's postgres database over
// its unix socket as the superuser (local trust; the password is offered
// when asked), its statements kept out of pg_stat_statements.
func (a *Agent) connect(ctx context.Context) (*pgx.Conn, error) {
	return a.connectTo(ctx, "postgres", "", untracked)
}

// connectTo is connect to database as user ("": the superuser, with its
// password), with the session's settings params.
func (a *Agent) connectTo(ctx context.Context, database, user string, params map[string]string) (*pgx.Conn, error) {
	password := a.cfg.Password
	if user == "" {
		user = a.cfg.User
	} else if user != a.cfg.User {
		password = ""
	}
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable connect_timeout=3 application_name=dbkeeper-agent",
		conninfoValue(a.cfg.SocketDir), a.cfg.Port, conninfoValue(user), conninfoValue(database)))
	if err != nil {
		return nil, fmt.Errorf("connecting to the server: %w", err)
	}
	cfg.Password = password
	for k, v := range params {
		cfg.RuntimeParams[k] = v
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to the server as %s: %w", user, err)
	}
	return c, nil
}

// statusSQL reads the server's role, positions, timeline and identity.
// A primary's timeline is its current WAL file's; a standby's is the one
// its WAL receiver streams, else its last checkpoint's.
const statusSQL = `SELECT pg_is_in_recovery(),
	(SELECT system_identifier::text FROM pg_control_system()),
	CASE WHEN pg_is_in_recovery() THEN '' ELSE pg_current_wal_lsn()::text END,
	COALESCE(pg_last_wal_receive_lsn()::text, ''),
	COALESCE(pg_last_wal_replay_lsn()::text, ''),
	CASE WHEN pg_is_in_recovery()
		THEN COALESCE((SELECT received_tli FROM pg_stat_wal_receiver), (SELECT timeline_id FROM pg_control_checkpoint()))
		ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END,
	COALESCE((SELECT status FROM pg_stat_wal_receiver), '')`

// queryRow runs one query on the local server, within queryTimeout, and
// scans its row into dest.
func (a *Agent) queryRow(ctx context.Context, sql string, dest ...any) error {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return c.QueryRow(ctx, sql).Scan(dest...)
}

// queryStatus fills s from the running server.
func (a *Agent) queryStatus(ctx context.Context, s *agentapi.Status) error {
	var recovery bool
	var tli int64
	if err := a.queryRow(ctx, statusSQL, &recovery, &s.SystemID, &s.CurrentLSN, &s.ReceivedLSN, &s.ReplayedLSN, &tli, &s.WALReceiver); err != nil {
		return fmt.Errorf("reading the server's status: %w", err)
	}
	s.Role = agentapi.RolePrimary
	if recovery {
		s.Role = agentapi.RoleReplica
	}
	s.Timeline = uint32(tli)
	s.Ready = true
	return nil
}

// ping says whether the server accepts connections.
func (a *Agent) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return c.Ping(ctx)
}

// exec runs one statement on the local server.
func (a *Agent) exec(ctx context.Context, sql string, args ...any) error {
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("running %q: %w", strings.Fields(sql)[0], err)
	}
	return nil
}

// diskStatus fills s from the data directory, for a server that does not
// run: its role from standby.signal, its identity and timeline from
// pg_control.
func (a *Agent) diskStatus(ctx context.Context, s *agentapi.Status) {
	empty, err := isEmpty(a.cfg.PGData)
	s.DataEmpty = err == nil && empty
	if !hasCluster(a.cfg.PGData) {
		return
	}
	s.Role = agentapi.RolePrimary
	if isStandby(a.cfg.PGData) {
		s.Role = agentapi.RoleReplica
	}
	cd, err := a.controlData(ctx)
	if err != nil {
		return
	}
	s.SystemID = cd["Database system identifier"]
	if tli, err := strconv.ParseUint(cd["Latest checkpoint's TimeLineID"], 10, 32); err == nil {
		s.Timeline = uint32(tli)
	}
}

// controlData runs pg_controldata on the data directory and returns its
// fields.
func (a *Agent) controlData(ctx context.Context) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "pg_controldata", "-D", a.cfg.PGData)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if err := a.reaper.start(cmd); err != nil {
		return nil, fmt.Errorf("running pg_controldata: %w", err)
	}
	if err := a.reaper.wait(cmd); err != nil {
		return nil, fmt.Errorf("running pg_controldata: %w: %s", err, bytes.TrimSpace(out.Bytes()))
	}
	fields := map[string]string{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
			fields[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return fields, nil
}
