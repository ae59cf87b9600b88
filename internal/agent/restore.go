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
)

// BootstrapRestore fills the empty data directory of the first instance
// from EnvRecovery's repository (pgbackrest restore of the newest base
// backup before the target) and starts the server in targeted recovery:
// it replays archived WAL up to the target, accepts no connection
// meanwhile (hot_standby=off), and is promoted at the target.
const BootstrapRestore BootstrapMode = "restore"

// restoreTimeout bounds the copy of a base backup.
const restoreTimeout = 6 * time.Hour

// recoverySettingsPath keeps, beside the data directory, the recovery
// settings pgbackrest restore wrote: the agent gives them to the server
// on the command line while recovery.signal is there, never in
// postgresql.auto.conf, which a standby cloned from this instance would
// inherit (a recovery_target there would stop its replay).
func (a *Agent) recoverySettingsPath() string {
	return filepath.Join(filepath.Dir(a.cfg.PGData), "dbkeeper-recovery.json")
}

// sourceConfigPath is the pgBackRest configuration of the recovery's
// source repository.
func (a *Agent) sourceConfigPath() string {
	return filepath.Join(a.runtimeDir, "source.conf")
}

// restore copies the base backup and starts the recovery (under a.op,
// once the agent holds the primary lease). A failed copy empties the data
// directory again.
func (a *Agent) restore() error {
	src := a.cfg.Recovery
	if err := a.writeConfig(src.Repository, a.sourceConfigPath()); err != nil {
		return err
	}
	target, err := src.Target.restoreArgs()
	if err != nil {
		return err
	}
	restoreCmd := fmt.Sprintf(`pgbackrest --config=%s --stanza=%s archive-get %%f "%%p"`, a.sourceConfigPath(), Stanza)
	args := append([]string{"restore", "--recovery-option=restore_command=" + restoreCmd}, target...)
	start := time.Now()
	a.setState(StateBootstrapping, "restoring the base backup before "+src.Target.String()+" from "+src.Repository.Bucket+src.Repository.Path)
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
	a.log.Info("Restored the base backup: replaying the archive", "duration", time.Since(start).Round(time.Millisecond), "target", src.Target.String())
	return a.startServer(StateStarting)
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

// checkRestore says whether a restore bootstrap can run.
func (a *Agent) checkRestore() error {
	if a.cfg.Recovery == nil {
		return &opError{code: http.StatusBadRequest, msg: "a restore needs $" + EnvRecovery}
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
		_, err = c.Exec(a.ctx, stmt)
	}
	if err != nil {
		a.log.Error(err, "Cannot set the superuser's password after the recovery")
		return
	}
	if err := os.Remove(path); err != nil {
		a.log.Error(err, "Cannot remove the recovery's settings")
	}
	a.log.Info("The recovery has finished: the server was promoted and the superuser has this Database's password")
}
