package agent

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// VerifyCommand is the manager's subcommand that verifies the newest base
// backup of $DBKEEPER_REPOSITORY in a throwaway pod (the backup
// controller's verification Job): see Verify.
const VerifyCommand = "verify-backup"

// VerifyReport is what a verification found; the verification pod writes
// it, as JSON, to its termination message, where the backup controller
// reads it.
type VerifyReport struct {
	// Backup is the label of the base backup restored.
	Backup string `json:"backup,omitempty"`
	// ReplayedLSN is the last WAL record replayed, the end of the archive
	// the verification found.
	ReplayedLSN string `json:"replayedLSN,omitempty"`
	// LatestCommit is the commit time of the last transaction replayed.
	LatestCommit *metav1.Time `json:"latestCommit,omitempty"`
	// Database is the database whose rows were counted.
	Database string `json:"database,omitempty"`
	// Tables and Rows count the ordinary tables of Database outside the
	// system schemas, and their rows (exactly).
	Tables int   `json:"tables"`
	Rows   int64 `json:"rows"`
	// Duration is how long the verification took.
	Duration metav1.Duration `json:"duration"`
	// Error says what failed: the restore (a corrupted file in the store),
	// the server's start or replay, or pg_amcheck's findings. Empty when
	// the backup restored, replayed to consistency and checked clean.
	Error string `json:"error,omitempty"`
}

// maxReportError keeps the report within the kubelet's 4096-byte
// termination message.
const maxReportError = 2000

// VerifyConfig is a verification's settings (VerifyMain's flags).
type VerifyConfig struct {
	// Repository is the repository whose newest base backup is verified.
	Repository Repository
	// PGData is an empty (or missing) directory on the scratch volume.
	PGData string
	// SocketDir and Port are where the throwaway server listens (a Unix
	// socket only: it takes no network connection).
	SocketDir string
	Port      int
	// User is the cluster's superuser, the Database's POSTGRES_USER.
	User string
	// Database is the database whose rows are counted.
	Database string
	// Timeout bounds the whole verification.
	Timeout time.Duration
}

// VerifyMain parses `manager verify-backup` flags, verifies, and writes
// the report to --report (the termination message) and stdout. It returns
// an error when the verification failed, so that the pod (and its Job)
// fails too.
func VerifyMain(args []string, bindFlags func(*flag.FlagSet), newLog func() logr.Logger) error {
	fs := flag.NewFlagSet(VerifyCommand, flag.ContinueOnError)
	cfg := VerifyConfig{}
	report := ""
	fs.StringVar(&cfg.PGData, "pgdata", os.Getenv("PGDATA"), "the empty directory the backup is restored into")
	fs.StringVar(&cfg.SocketDir, "socket-dir", "/var/run/postgresql", "the directory of the throwaway server's Unix socket")
	fs.IntVar(&cfg.Port, "port", 5432, "the throwaway server's port (its socket's name)")
	fs.StringVar(&cfg.User, "user", cmp.Or(os.Getenv("PGUSER"), os.Getenv("POSTGRES_USER")), "the cluster's superuser")
	fs.StringVar(&cfg.Database, "database", cmp.Or(os.Getenv("PGDATABASE"), os.Getenv("DBKEEPER_APP_ROLE")),
		"the database whose rows are counted (default: the application role's name, else the superuser's)")
	fs.DurationVar(&cfg.Timeout, "timeout", 2*time.Hour, "how long the verification may take")
	fs.StringVar(&report, "report", "/dev/termination-log", "where the JSON report is written")
	if bindFlags != nil {
		bindFlags(fs)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if _, err := readEnvJSON(EnvRepository, &cfg.Repository); err != nil {
		return err
	}
	if cfg.Repository.Bucket == "" {
		return fmt.Errorf("%s: $%s names no repository", VerifyCommand, EnvRepository)
	}
	if cfg.User == "" {
		cfg.User = "postgres"
	}
	if cfg.Database == "" {
		cfg.Database = cfg.User
	}
	log := newLog()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	rep := Verify(ctx, cfg, log)
	raw, _ := json.Marshal(rep)
	fmt.Println(string(raw))
	if report != "" {
		if err := os.WriteFile(report, raw, 0o644); err != nil {
			log.Error(err, "Cannot write the report", "path", report)
		}
	}
	if rep.Error != "" {
		return errors.New(rep.Error)
	}
	return nil
}

// Verify restores the repository's newest base backup into cfg.PGData,
// starts a server on it that replays the archive to its end (no network,
// archive_mode off: it never writes to the repository nor reaches the
// live instances), checks it with pg_amcheck, counts the rows of
// cfg.Database, and stops it. Every failure is in the report's Error.
func Verify(ctx context.Context, cfg VerifyConfig, log logr.Logger) VerifyReport {
	start := time.Now()
	rep := VerifyReport{Database: cfg.Database}
	err := verify(ctx, cfg, log, &rep)
	rep.Duration = metav1.Duration{Duration: time.Since(start).Round(time.Millisecond)}
	if err != nil {
		msg := err.Error()
		if len(msg) > maxReportError {
			msg = msg[:maxReportError] + "…"
		}
		rep.Error = msg
		log.Error(err, "The verification failed", "backup", rep.Backup)
	} else {
		log.Info("The backup verified", "backup", rep.Backup, "replayedLSN", rep.ReplayedLSN, "tables", rep.Tables, "rows", rep.Rows, "duration", rep.Duration.Duration)
	}
	return rep
}

func verify(ctx context.Context, cfg VerifyConfig, log logr.Logger, rep *VerifyReport) error {
	work := filepath.Join(filepath.Dir(cfg.PGData), "dbkeeper-verify")
	if err := os.MkdirAll(filepath.Join(work, "lock"), 0o700); err != nil {
		return fmt.Errorf("making %s: %w", work, err)
	}
	if empty, err := isEmpty(cfg.PGData); err == nil && !empty {
		return fmt.Errorf("the data directory %s is not empty", cfg.PGData)
	}
	o, err := cfg.Repository.pgbackrestOptions(work)
	if err != nil {
		return err
	}
	conf := filepath.Join(work, "pgbackrest.conf")
	if _, err := writeFileAtomic(conf, []byte(pgbackrestConfig(o, cfg.PGData, cfg.SocketDir, cfg.Port, cfg.User))); err != nil {
		return err
	}
	pgbackrest := func(timeout time.Duration, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		out, err := runOutput(ctx, "pgbackrest", append([]string{"--config=" + conf, "--stanza=" + Stanza}, args...)...)
		if err != nil {
			return out, fmt.Errorf("pgbackrest %s: %s", args[0], pgbackrestError(out, err))
		}
		return out, nil
	}

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
	restoreCmd := fmt.Sprintf(`pgbackrest --config=%s --stanza=%s archive-get %%f "%%p"`, conf, Stanza)
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

	// its own pg_hba.conf: trust on the socket, nothing else.
	hba := filepath.Join(work, "pg_hba.conf")
	if err := os.WriteFile(hba, []byte("local all all trust\n"), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", hba, err)
	}
	logPath := filepath.Join(work, "postgres.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("creating %s: %w", logPath, err)
	}
	defer logFile.Close()
	server := exec.Command("postgres", "-D", cfg.PGData,
		"-c", "listen_addresses=", "-c", "port="+strconv.Itoa(cfg.Port), "-c", "unix_socket_directories="+cfg.SocketDir,
		"-c", "hba_file="+hba, "-c", "ssl=off", "-c", "archive_mode=off", "-c", "hot_standby=on",
		"-c", "log_min_messages=warning")
	server.Stdout, server.Stderr = logFile, logFile
	server.Env = append(os.Environ(), "LC_ALL=C")
	if err := server.Start(); err != nil {
		return fmt.Errorf("starting the server: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- server.Wait() }()
	defer func() {
		// a fast shutdown; the volume goes with the pod anyway.
		_ = server.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			_ = server.Process.Kill()
			<-exited
		}
	}()
	serverLog := func() string {
		b, _ := os.ReadFile(logPath)
		return tail(string(b), 800)
	}

	log.Info("Replaying the archive to its end")
	conn, err := waitPromoted(ctx, cfg, exited, serverLog)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var lsn string
	var latest *time.Time
	if err := conn.QueryRow(ctx, "SELECT COALESCE(pg_last_wal_replay_lsn()::text, ''), pg_last_xact_replay_timestamp()").Scan(&lsn, &latest); err != nil {
		return fmt.Errorf("reading how far the server replayed: %w", err)
	}
	rep.ReplayedLSN = lsn
	if latest != nil {
		t := metav1.NewTime(latest.UTC())
		rep.LatestCommit = &t
	}

	log.Info("Checking the restored cluster with pg_amcheck", "replayedLSN", lsn)
	if out, err := runOutput(ctx, "pg_amcheck", "--all", "--install-missing",
		"--host="+cfg.SocketDir, "--port="+strconv.Itoa(cfg.Port), "--username="+cfg.User); err != nil {
		return fmt.Errorf("pg_amcheck found corruption or could not check: %s", tail(strings.TrimSpace(out), 1200))
	}
	return countRows(ctx, cfg, rep)
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

// waitPromoted connects to the throwaway server once it has replayed the
// archive and promoted, and fails when it exits first.
func waitPromoted(ctx context.Context, cfg VerifyConfig, exited <-chan error, serverLog func() string) (*pgx.Conn, error) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			return nil, fmt.Errorf("the server stopped during the replay (%v): %s", err, serverLog())
		case <-ctx.Done():
			return nil, fmt.Errorf("the replay did not finish in time: %s", serverLog())
		case <-tick.C:
		}
		conn, err := connectLocal(ctx, cfg, "postgres")
		if err != nil {
			continue
		}
		var recovering bool
		if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovering); err == nil && !recovering {
			return conn, nil
		}
		conn.Close(context.Background())
	}
}

// countRows counts the ordinary tables of cfg.Database outside the system
// schemas and their rows.
func countRows(ctx context.Context, cfg VerifyConfig, rep *VerifyReport) error {
	conn, err := connectLocal(ctx, cfg, cfg.Database)
	if err != nil {
		return fmt.Errorf("connecting to database %s of the restored cluster: %w", cfg.Database, err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT n.nspname, c.relname FROM pg_catalog.pg_class c
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
		AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_toast%'
		ORDER BY 1, 2`)
	if err != nil {
		return fmt.Errorf("listing the tables of %s: %w", cfg.Database, err)
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pgx.Identifier, error) {
		var ns, rel string
		err := r.Scan(&ns, &rel)
		return pgx.Identifier{ns, rel}, err
	})
	if err != nil {
		return fmt.Errorf("listing the tables of %s: %w", cfg.Database, err)
	}
	for _, t := range tables {
		var n int64
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+t.Sanitize()).Scan(&n); err != nil {
			return fmt.Errorf("counting the rows of %s: %w", t.Sanitize(), err)
		}
		rep.Tables++
		rep.Rows += n
	}
	return nil
}

// connectLocal connects to database db of the throwaway server over its
// socket, as the superuser (trust).
func connectLocal(ctx context.Context, cfg VerifyConfig, db string) (*pgx.Conn, error) {
	c, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable connect_timeout=3 application_name=dbkeeper-verify",
		conninfoValue(cfg.SocketDir), cfg.Port, conninfoValue(cfg.User), conninfoValue(db)))
	if err != nil {
		return nil, fmt.Errorf("connecting to the restored server: %w", err)
	}
	return c, nil
}

// runOutput runs a command and returns its combined output.
func runOutput(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	err := cmd.Run()
	return out.String(), err
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
