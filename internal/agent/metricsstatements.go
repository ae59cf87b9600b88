package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// statementTextMax is how many characters of a statement's normalised text
// its query label holds.
const statementTextMax = 120

// errNoStatements says the statements' database lacks the extension.
var errNoStatements = errors.New("pg_stat_statements is not created in the database")

// metricsStatementsSchemaSQL finds the schema of pg_stat_statements.
const metricsStatementsSchemaSQL = `SELECT n.nspname FROM pg_catalog.pg_extension e
	JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_stat_statements'`

// metricsStatementsSQL reads the $1 statements that took the most execution
// time, from pg_stat_statements in schema %s: one row per statement,
// database and user (PostgreSQL 14 keeps a top-level and a nested row
// apart: they are added up), its text with runs of white space made one
// space.
const metricsStatementsSQL = `SELECT s.queryid::text, d.datname, r.rolname,
	left(regexp_replace(min(s.query), '\s+', ' ', 'g'), %d),
	sum(s.calls)::float8, (sum(s.total_exec_time) / 1000)::float8, sum(s.rows)::float8
	FROM %s.pg_stat_statements s
	JOIN pg_catalog.pg_database d ON d.oid = s.dbid
	JOIN pg_catalog.pg_roles r ON r.oid = s.userid
	WHERE s.queryid IS NOT NULL
	GROUP BY s.queryid, d.datname, r.rolname
	ORDER BY sum(s.total_exec_time) DESC, s.queryid
	LIMIT $1`

// readTopStatements reports m.o.TopStatements statements of
// pg_stat_statements, read in m.o.StatementsDatabase (where the extension
// is created; its view shows every database's statements).
func (m *metricsCollector) readTopStatements(ctx context.Context, b *metricsBatch) error {
	conn, err := m.a.connectTo(ctx, m.o.StatementsDatabase, "", untracked)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var schema string
	if err := conn.QueryRow(ctx, metricsStatementsSchemaSQL).Scan(&schema); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("database %q: %w", m.o.StatementsDatabase, errNoStatements)
		}
		return err
	}
	rows, err := conn.Query(ctx, fmt.Sprintf(metricsStatementsSQL, statementTextMax, pgx.Identifier{schema}.Sanitize()), m.o.TopStatements)
	if err != nil {
		return err
	}
	var queryID, datname, user, text string
	var calls, seconds, rowCount float64
	_, err = pgx.ForEachRow(rows, []any{&queryID, &datname, &user, &text, &calls, &seconds, &rowCount}, func() error {
		b.counter(statementCallsDesc, calls, queryID, datname, user, text)
		b.counter(statementTimeDesc, seconds, queryID, datname, user, text)
		b.counter(statementRowsDesc, rowCount, queryID, datname, user, text)
		return nil
	})
	return err
}
