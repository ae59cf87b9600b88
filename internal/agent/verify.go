package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// maxReportError keeps the report within the kubelet's 4096-byte
// termination message.
const maxReportError = 2000

// VerifyConfig is a verification's settings (VerifyMain's flags).
type VerifyConfig struct {
	// Repository is the repository whose newest base backup is verified.
	Repository agentapi.Repository
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
	fs := flag.NewFlagSet(agentapi.VerifyCommand, flag.ContinueOnError)
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
	if _, err := readEnvJSON(agentapi.EnvRepository, &cfg.Repository); err != nil {
		return err
	}
	if cfg.Repository.Bucket == "" {
		return fmt.Errorf("%s: $%s names no repository", agentapi.VerifyCommand, agentapi.EnvRepository)
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
func Verify(ctx context.Context, cfg VerifyConfig, log logr.Logger) agentapi.VerifyReport {
	start := time.Now()
	rep := agentapi.VerifyReport{Database: cfg.Database}
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

// verify is Verify's steps, in order; it fills rep as it goes.
func verify(ctx context.Context, cfg VerifyConfig, log logr.Logger, rep *agentapi.VerifyReport) error {
	work := filepath.Join(filepath.Dir(cfg.PGData), "dbkeeper-verify")
	pgbackrest, conf, err := prepareVerify(ctx, cfg, work)
	if err != nil {
		return err
	}
	if err := restoreNewest(cfg, log, rep, pgbackrest, conf); err != nil {
		return err
	}
	server, err := startThrowaway(cfg, work)
	if err != nil {
		return err
	}
	defer server.stop()

	log.Info("Replaying the archive to its end")
	conn, err := waitPromoted(ctx, cfg, server)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if err := readReplayed(ctx, conn, rep); err != nil {
		return err
	}

	log.Info("Checking the restored cluster with pg_amcheck", "replayedLSN", rep.ReplayedLSN)
	if err := amcheck(ctx, cfg); err != nil {
		return err
	}
	return countRows(ctx, cfg, rep)
}
