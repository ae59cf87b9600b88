package agent

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/engine"
)

// restoreTimeout bounds the copy of a base backup.
const restoreTimeout = 6 * time.Hour

// recoveryDir, beside the data directory on its volume, holds what an
// unfinished recovery needs across restarts: the source's pgBackRest
// configuration (restore_command reads it while the server replays), the
// recovery settings, and the mark of a restore that has not finished
// copying. finishRecovery removes it.
func (a *Agent) recoveryDir() string {
	return filepath.Join(filepath.Dir(a.cfg.PGData), "dbkeeper-recovery")
}

// recoverySettingsPath keeps the recovery settings pgbackrest restore
// wrote: the agent gives them to the server on the command line while
// recovery.signal is there, never in postgresql.auto.conf, which a standby
// cloned from this instance would inherit (a recovery_target there would
// stop its replay).
func (a *Agent) recoverySettingsPath() string { return filepath.Join(a.recoveryDir(), "settings.json") }

// sourceConfigPath is the pgBackRest configuration of the recovery's
// source repository.
func (a *Agent) sourceConfigPath() string { return filepath.Join(a.recoveryDir(), "source.conf") }

// restoringMark says a restore began copying and has not finished: the
// data directory is incomplete.
func (a *Agent) restoringMark() string { return filepath.Join(a.recoveryDir(), "restoring") }

// restore copies the newest base backup before src's target and starts
// the recovery (under a.op, once the agent holds the primary lease). A
// failed copy empties the data directory again.
func (a *Agent) restore(src agentapi.RecoverySource) error {
	if err := os.MkdirAll(filepath.Join(a.recoveryDir(), "lock"), 0o700); err != nil {
		return fmt.Errorf("making %s: %w", a.recoveryDir(), err)
	}
	if err := a.writeConfig(src.Repository, a.sourceConfigPath()); err != nil {
		return err
	}
	target, err := restoreArgs(src.Target)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(a.cfg.PGData, 0o700); err != nil {
		return fmt.Errorf("making the data directory: %w", err)
	}
	if err := os.WriteFile(a.restoringMark(), nil, 0o600); err != nil {
		return fmt.Errorf("marking the restore: %w", err)
	}
	restoreCmd := fmt.Sprintf(`pgbackrest --config=%s --stanza=%s archive-get %%f "%%p"`, a.sourceConfigPath(), agentapi.Stanza)
	args := append([]string{"restore", longIOTimeout, "--recovery-option=restore_command=" + restoreCmd}, target...)
	start := time.Now()
	a.setState(agentapi.StateBootstrapping, "restoring the base backup before "+src.Target.String()+" from "+src.Repository.Bucket+src.Repository.Path)
	a.log.Info("Restoring", "bucket", src.Repository.Bucket, "path", src.Repository.Path, "target", src.Target.String())
	if _, err := a.pgbackrest(a.ctx, a.sourceConfigPath(), restoreTimeout, args...); err != nil {
		if rerr := emptyDir(a.cfg.PGData); rerr != nil {
			return fmt.Errorf("%w; %w", err, rerr)
		}
		return err
	}
	if err := a.moveRecoverySettings(); err != nil {
		return err
	}
	if err := os.Remove(a.restoringMark()); err != nil {
		return fmt.Errorf("unmarking the restore: %w", err)
	}
	a.log.Info("Restored the base backup: replaying the archive", "duration", time.Since(start).Round(time.Millisecond), "target", src.Target.String())
	return a.startServer(agentapi.StateStarting)
}

// clearHalfRestore empties a data directory whose restore was cut short
// (the agent stopped while pgbackrest restore copied), so that the
// instance waits to be bootstrapped again instead of starting what is
// there.
func (a *Agent) clearHalfRestore() error {
	if _, err := os.Stat(a.restoringMark()); err != nil {
		return nil
	}
	a.log.Info("A restore was cut short: emptying the data directory to start it over")
	if err := emptyDir(a.cfg.PGData); err != nil {
		return err
	}
	return os.RemoveAll(a.recoveryDir())
}

// moveRecoverySettings takes restore_command and the recovery_target
// settings out of postgresql.auto.conf into recoverySettingsPath.
func (a *Agent) moveRecoverySettings() error {
	auto := filepath.Join(a.cfg.PGData, "postgresql.auto.conf")
	b, err := os.ReadFile(auto)
	if err != nil {
		return fmt.Errorf("reading postgresql.auto.conf after the restore: %w", err)
	}
	settings := map[string]string{}
	var kept []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if ok && (k == "restore_command" || strings.HasPrefix(k, "recovery_target")) {
			settings[k] = unquoteSetting(strings.TrimSpace(v))
			continue
		}
		kept = append(kept, line)
	}
	raw, _ := json.Marshal(settings)
	if _, err := writeFileAtomic(a.recoverySettingsPath(), raw); err != nil {
		return err
	}
	if err := os.WriteFile(auto, []byte(strings.Join(kept, "\n")+"\n"), 0o600); err != nil {
		return fmt.Errorf("writing postgresql.auto.conf: %w", err)
	}
	return nil
}

// unquoteSetting reads a postgresql.conf value: 'quoted' with ” for a
// quote, or bare.
func unquoteSetting(v string) string {
	if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
		return strings.ReplaceAll(v[1:len(v)-1], "''", "'")
	}
	return v
}

// recoveryArgs are the server settings of an unfinished targeted recovery:
// pgbackrest restore's, and no connections until it is promoted. Once
// PostgreSQL has promoted (recovery.signal gone) there are none, and the
// settings file goes.
func (a *Agent) recoveryArgs() []string {
	path := a.recoverySettingsPath()
	if !hasRecoverySignal(a.cfg.PGData) {
		// promoted; finishRecovery removes the file once the superuser
		// has its password.
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var settings map[string]string
	if json.Unmarshal(b, &settings) != nil {
		return nil
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	args := []string{"-c", "hot_standby=off"}
	for _, k := range keys {
		args = append(args, "-c", k+"="+settings[k])
	}
	return args
}

// checkRestore says whether req can restore.
func checkRestore(req agentapi.BootstrapRequest) error {
	if req.Recovery == nil {
		return &opError{code: http.StatusBadRequest, msg: "a restore bootstrap needs its recovery source"}
	}
	if _, err := restoreArgs(req.Recovery.Target); err != nil {
		return &opError{code: http.StatusBadRequest, msg: err.Error()}
	}
	return nil
}

// finishRecovery, once a restored server was promoted, gives this
// Database's superuser ($POSTGRES_USER) its own password: the restored
// cluster carries the source's, which the operator does not have.
func (a *Agent) finishRecovery() {
	path := a.recoverySettingsPath()
	if _, err := os.Stat(path); err != nil || hasRecoverySignal(a.cfg.PGData) {
		return
	}
	c, err := a.connect(a.ctx)
	if err != nil {
		a.log.Error(err, "Cannot set the superuser's password after the recovery")
		return
	}
	defer c.Close(a.ctx)
	var stmt string
	err = c.QueryRow(a.ctx, `SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = $1)
		THEN format('ALTER ROLE %I WITH SUPERUSER LOGIN PASSWORD %L', $1::text, $2::text)
		ELSE format('CREATE ROLE %I WITH SUPERUSER LOGIN PASSWORD %L', $1::text, $2::text) END`,
		a.cfg.User, a.cfg.Password).Scan(&stmt)
	if err == nil {
		// the statement carries the password: kept out of the server log
		err = pgx.BeginFunc(a.ctx, c, func(tx pgx.Tx) error {
			if _, err := tx.Exec(a.ctx, engine.Postgres{}.Unlogged()); err != nil {
				return err
			}
			_, err := tx.Exec(a.ctx, stmt)
			return err
		})
	}
	if err != nil {
		a.log.Error(err, "Cannot set the superuser's password after the recovery")
		return
	}
	if err := os.RemoveAll(a.recoveryDir()); err != nil {
		a.log.Error(err, "Cannot remove the recovery's files")
	}
	a.log.Info("The recovery has finished: the server was promoted and the superuser has this Database's password")
}

// recovering says a restore's recovery has not finished: its settings are
// kept and recovery.signal is in the data directory.
func (a *Agent) recovering() bool {
	_, err := os.Stat(a.recoverySettingsPath())
	return err == nil && hasRecoverySignal(a.cfg.PGData)
}

// The delays before the server of an unfinished recovery starts again
// after it exited on its own: recoveryRetryFirst, doubling with each exit
// up to recoveryRetryMax, as the kubelet's back-off of a crashing
// container.
const (
	recoveryRetryFirst = 10 * time.Second
	recoveryRetryMax   = 5 * time.Minute
)

// recoveryRetryDelay is how long the server waits to start again after
// its n-th exit (from 1) during a recovery.
func recoveryRetryDelay(n int) time.Duration {
	d := recoveryRetryFirst
	for i := 1; i < n && d < recoveryRetryMax; i++ {
		d *= 2
	}
	return min(d, recoveryRetryMax)
}

// recoveryEndedEarly is what PostgreSQL says when it replayed all the
// archive it could read without reaching the recovery target.
const recoveryEndedEarly = "recovery ended before configured recovery target"

// outputDrain bounds the wait for the last lines of a server that exited.
const outputDrain = 2 * time.Second

// recoveryExited reports srv, which exited on its own (err) before its
// recovery finished, as Failed with the line that says why, and starts it
// again after recoveryRetryDelay instead of failing the agent. PostgreSQL
// ends a recovery that did not reach its target both when the target lies
// past the end of the archive and when restore_command failed meanwhile
// (the store unreachable): only the second heals, and the agent must not
// exit for either (the kubelet would restart the container in a loop in
// which the operator seldom reads why).
func (a *Agent) recoveryExited(srv *server, err error) {
	line := exitLine(srv.output.lines(outputDrain))
	a.mu.Lock()
	a.recoveryExits++
	n := a.recoveryExits
	a.mu.Unlock()
	delay := recoveryRetryDelay(n)
	msg := fmt.Sprintf("the server exited during the recovery (%v)", err)
	if line != "" {
		msg += ": " + line
	}
	if strings.Contains(line, recoveryEndedEarly) {
		msg += "; the target may lie past the end of the archive (check spec.bootstrap.recovery.target), or the store could not be read"
	}
	a.log.Error(err, "The server exited during the recovery: starting it again later", "reason", line, "in", delay, "exits", n)
	a.setState(agentapi.StateFailed, fmt.Sprintf("%s; starting it again in %s", msg, delay))
	last := line
	if last == "" {
		last = err.Error()
	}
	go a.restartRecovery(delay, last)
}

// restartRecovery starts the server of an unfinished recovery again after
// delay, as a restart of the container would (startPrimary when the agent
// has a lease), unless the agent stops or its state changed meanwhile (a
// fence). Its state is then Starting, its message what ended the last run.
func (a *Agent) restartRecovery(delay time.Duration, last string) {
	select {
	case <-a.ctx.Done():
		return
	case <-time.After(delay):
	}
	a.op.Lock()
	defer a.op.Unlock()
	a.mu.Lock()
	failed := a.state == agentapi.StateFailed && a.srv == nil && !a.stopping
	a.mu.Unlock()
	if !failed || a.ctx.Err() != nil {
		return
	}
	a.log.Info("Starting the server again to go on with the recovery")
	if a.keeper != nil {
		a.startPrimary()
	} else if err := a.startServer(agentapi.StateStarting); err != nil {
		a.fail(err)
		return
	}
	a.mu.Lock()
	if a.srv != nil && a.state == agentapi.StateStarting && a.message == "" {
		a.message = "replaying the archive again; the last run ended with: " + last
	}
	a.mu.Unlock()
}
