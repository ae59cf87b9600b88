package agent

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// readReplayed notes how far the server replayed: the position of its
// last record and the time of its latest commit.
func readReplayed(ctx context.Context, conn *pgx.Conn, rep *agentapi.VerifyReport) error {
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
	return nil
}

// amcheck checks the restored cluster with pg_amcheck.
func amcheck(ctx context.Context, cfg VerifyConfig) error {
	if out, err := runOutput(ctx, "pg_amcheck", "--all", "--install-missing",
		"--host="+cfg.SocketDir, "--port="+strconv.Itoa(cfg.Port), "--username="+cfg.User); err != nil {
		return fmt.Errorf("pg_amcheck found corruption or could not check: %s", tail(strings.TrimSpace(out), 1200))
	}
	return nil
}

// countRows counts the ordinary tables of cfg.Database outside the system
// schemas and their rows.
func countRows(ctx context.Context, cfg VerifyConfig, rep *agentapi.VerifyReport) error {
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
