package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// prepareVerify makes the work directory and pgBackRest's configuration
// of cfg.Repository in it, once it checked that cfg.PGData is empty. It
// returns a runner of pgbackrest with that configuration (each run
// bounded by its timeout, under ctx) and the configuration's path.
func prepareVerify(ctx context.Context, cfg VerifyConfig, work string) (func(time.Duration, ...string) (string, error), string, error) {
	if err := os.MkdirAll(filepath.Join(work, "lock"), 0o700); err != nil {
		return nil, "", fmt.Errorf("making %s: %w", work, err)
	}
	if empty, err := isEmpty(cfg.PGData); err == nil && !empty {
		return nil, "", fmt.Errorf("the data directory %s is not empty", cfg.PGData)
	}
	o, err := pgbackrestOptions(cfg.Repository, work)
	if err != nil {
		return nil, "", err
	}
	conf := filepath.Join(work, "pgbackrest.conf")
	if _, err := writeFileAtomic(conf, []byte(pgbackrestConfig(o, cfg.PGData, cfg.SocketDir, cfg.Port, cfg.User))); err != nil {
		return nil, "", err
	}
	pgbackrest := func(timeout time.Duration, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		out, err := runOutput(ctx, "pgbackrest", append([]string{"--config=" + conf, "--stanza=" + agentapi.Stanza}, args...)...)
		if err != nil {
			return out, fmt.Errorf("pgbackrest %s: %s", args[0], pgbackrestError(out, err))
		}
		return out, nil
	}
	return pgbackrest, conf, nil
}

// restoreNewest restores the repository's newest base backup into
// cfg.PGData (rep.Backup names it), its recovery set to fetch the archive
// with the configuration conf.
func restoreNewest(cfg VerifyConfig, log logr.Logger, rep *agentapi.VerifyReport, pgbackrest func(time.Duration, ...string) (string, error), conf string) error {
	out, err := pgbackrest(5*time.Minute, "info", "--output=json")
	if err != nil {
		return err
	}
	info, err := parseInfo(out)
	if err != nil {
		return err
	}
	if len(info.backups) == 0 {
		return fmt.Errorf("the repository %s%s has no base backup to verify", cfg.Repository.Bucket, cfg.Repository.Path)
	}
	newest := info.backups[len(info.backups)-1]
	rep.Backup = newest.Label
	log.Info("Restoring the base backup", "backup", newest.Label, "bucket", cfg.Repository.Bucket, "path", cfg.Repository.Path)
	if err := os.MkdirAll(cfg.PGData, 0o700); err != nil {
		return fmt.Errorf("making the data directory: %w", err)
	}
	restoreCmd := fmt.Sprintf(`pgbackrest --config=%s --stanza=%s archive-get %%f "%%p"`, conf, agentapi.Stanza)
	// one retry, at once: a checksum error does not heal in 15 s
	if _, err := pgbackrest(restoreTimeout, "restore", longIOTimeout, "--job-retry=1", "--set="+newest.Label, "--type=default",
		"--recovery-option=restore_command="+restoreCmd); err != nil {
		// the restore's error may not say which file (a zstd frame that
		// does not decode); pgBackRest's verify checks every file of the
		// repository against its manifest and names the bad ones.
		if bad := invalidFiles(pgbackrest); bad != "" {
			return fmt.Errorf("base backup %s does not restore: pgbackrest verify: %s; the restore: %w", newest.Label, bad, err)
		}
		return fmt.Errorf("restoring base backup %s: %w", newest.Label, err)
	}
	return nil
}

// invalidFiles runs pgbackrest verify and returns what it says of the
// repository's bad files, on one line; empty when it finds none or cannot
// run.
func invalidFiles(pgbackrest func(time.Duration, ...string) (string, error)) string {
	out, _ := pgbackrest(30*time.Minute, "verify", "--output=text", "--verbose=y", "--log-level-console=info")
	// "P01 INFO: invalid checksum '<label>/pg_data/PG_VERSION.zst'", and
	// "backup: <label>, status: invalid, total files checked: 971, ..."
	var bad []string
	seen := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if _, rest, ok := strings.Cut(line, "INFO: "); ok && strings.HasPrefix(rest, "invalid ") {
			line = rest
		} else if !strings.Contains(line, "status: invalid") {
			continue
		}
		if !seen[line] {
			seen[line] = true
			bad = append(bad, line)
		}
	}
	return tail(strings.Join(bad, "; "), 800)
}
