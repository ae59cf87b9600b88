package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dbkeeper/dbkeeper/internal/customqueries"
)

// readCustomQueries runs the user-defined queries of m.a.cfg.CustomQueries
// as m.o.QueriesUser (the application's role: what a query may read is
// what the application may; never the superuser, whose sessions could
// reset any role a query set), each in a read-only transaction of its
// database, and reports their rows. It returns how many queries failed
// (each logged with its name); a file that is missing is none (the
// Database names no ConfigMap, or its key is absent), one that does not
// parse is one failure.
func (m *metricsCollector) readCustomQueries(ctx context.Context, b *metricsBatch) int {
	data, err := os.ReadFile(m.a.cfg.CustomQueries)
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	var queries []customqueries.Query
	if err == nil {
		queries, err = customqueries.Parse(data)
	}
	if err != nil {
		m.a.log.Error(fmt.Errorf("reading %s: %w", m.a.cfg.CustomQueries, err), "Cannot read the user-defined metric queries")
		return 1
	}
	conns := map[string]*pgx.Conn{}
	defer func() {
		for _, c := range conns {
			c.Close(context.Background())
		}
	}()
	failed := 0
	for _, q := range queries {
		database := q.Database
		if database == "" {
			database = m.o.QueriesDatabase
		}
		conn := conns[database]
		if conn == nil {
			if conn, err = m.a.connectTo(ctx, database, m.o.QueriesUser, nil); err != nil {
				failed++
				m.a.log.Error(err, "Cannot run a user-defined metric query", "query", q.Name, "database", database)
				continue
			}
			conns[database] = conn
		}
		var qb metricsBatch
		truncated, err := runCustomQuery(ctx, conn, q, &qb)
		if err == nil {
			err = qb.err
		}
		if err != nil {
			failed++
			m.a.log.Error(err, "A user-defined metric query failed", "query", q.Name, "database", database)
			continue
		}
		if truncated {
			m.a.log.Info("A user-defined metric query returned too many rows: the first ones reported", "query", q.Name, "rows", customqueries.MaxRows)
		}
		b.samples = append(b.samples, qb.samples...)
	}
	return failed
}

// runCustomQuery runs q on conn in a read-only transaction and adds a
// sample per metric column and row (at most customqueries.MaxRows rows;
// truncated says there were more). A NULL metric is left out of its row.
func runCustomQuery(ctx context.Context, conn *pgx.Conn, q customqueries.Query, b *metricsBatch) (truncated bool, err error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return false, fmt.Errorf("beginning a read-only transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	rows, err := tx.Query(ctx, q.SQL)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	index := map[string]int{}
	for i, f := range rows.FieldDescriptions() {
		index[f.Name] = i
	}
	descs := make([]*prometheus.Desc, len(q.Columns))
	for i, c := range q.Columns {
		if _, ok := index[c.Name]; !ok {
			return false, fmt.Errorf("the query returns no column %s", c.Name)
		}
		if c.Usage == customqueries.Gauge || c.Usage == customqueries.Counter {
			help := c.Description
			if help == "" {
				help = "Column " + c.Name + " of the user-defined query " + q.Name + "."
			}
			descs[i] = prometheus.NewDesc(q.MetricName(c), help, q.Labels(), nil)
		}
	}
	n := 0
	seen := map[string]bool{}
	for rows.Next() {
		if n == customqueries.MaxRows {
			return true, nil
		}
		n++
		values, err := rows.Values()
		if err != nil {
			return false, err
		}
		var labels []string
		for _, c := range q.Columns {
			if c.Usage == customqueries.Label {
				labels = append(labels, labelValue(values[index[c.Name]]))
			}
		}
		// two series alike would fail the whole scrape
		key := strings.Join(labels, "\xff")
		if seen[key] {
			return false, fmt.Errorf("two rows have the same labels %s = %q: each row needs labels of its own", strings.Join(q.Labels(), ", "), labels)
		}
		seen[key] = true
		for i, c := range q.Columns {
			if descs[i] == nil || values[index[c.Name]] == nil {
				continue
			}
			v, err := sampleValue(values[index[c.Name]])
			if err != nil {
				return false, fmt.Errorf("column %s: %w", c.Name, err)
			}
			if c.Usage == customqueries.Counter {
				b.counter(descs[i], v, labels...)
			} else {
				b.gauge(descs[i], v, labels...)
			}
		}
	}
	return false, rows.Err()
}

// labelValue is a label column's value as text; NULL is "".
func labelValue(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case []byte:
		return string(v)
	default:
		return fmt.Sprint(v)
	}
}

// sampleValue is a metric column's value as a sample: a number, a boolean
// (1 or 0), or text that reads as a number.
func sampleValue(v any) (float64, error) {
	switch v := v.(type) {
	case int16:
		return float64(v), nil
	case int32:
		return float64(v), nil
	case int64:
		return float64(v), nil
	case float32:
		return float64(v), nil
	case float64:
		return v, nil
	case bool:
		if v {
			return 1, nil
		}
		return 0, nil
	case pgtype.Numeric:
		f, err := v.Float64Value()
		if err != nil || !f.Valid {
			return 0, fmt.Errorf("the numeric %v is not a number", v)
		}
		return f.Float64, nil
	case string:
		return strconv.ParseFloat(v, 64)
	default:
		return 0, fmt.Errorf("a value of type %T is not a number: cast it (::float8)", v)
	}
}
