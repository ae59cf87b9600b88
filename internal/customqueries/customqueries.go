// Package customqueries reads the user-defined metric queries of a
// Database (spec.monitoring.customQueries): a YAML file in the format of
// the Prometheus community's postgres_exporter (which CloudNativePG's users
// know too), each query naming its columns as labels or as gauges and
// counters. The agent runs them (internal/agent); this package only parses
// and checks them, so that a mistake is reported with the query and column
// it is in.
package customqueries

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Limits of one file.
const (
	// MaxQueries is how many queries one file may hold.
	MaxQueries = 50
	// MaxRows is how many rows of one query are reported; the others are
	// left out (and the agent says so): each row is a series per metric
	// column, on the manager and in Prometheus.
	MaxRows = 1000
)

// Usage is what a column of a query's rows becomes.
type Usage string

// The usages of a column; postgres_exporter's others (MAPPEDMETRIC,
// DURATION, HISTOGRAM) are refused by name.
const (
	Label   Usage = "LABEL"
	Gauge   Usage = "GAUGE"
	Counter Usage = "COUNTER"
	Discard Usage = "DISCARD"
)

// Column is one column of a query's rows.
type Column struct {
	Name        string
	Usage       Usage
	Description string
}

// Query is one query and what its columns are.
type Query struct {
	// Name prefixes its series: dbkeeper_postgres_custom_<name>_<column>.
	Name string
	// SQL is the query, one statement.
	SQL string
	// Database is where it runs; empty means the application's database.
	Database string
	// Columns are in the order of the file.
	Columns []Column
}

// Labels are the names of the query's label columns, in order.
func (q Query) Labels() []string {
	var out []string
	for _, c := range q.Columns {
		if c.Usage == Label {
			out = append(out, c.Name)
		}
	}
	return out
}

// MetricName is the name of the series of column c of q.
func (q Query) MetricName(c Column) string {
	return "dbkeeper_postgres_custom_" + q.Name + "_" + c.Name
}

// reservedLabels are labels a column may not be: the manager adds the first
// three to every series it serves, Prometheus the last two to every scraped
// one.
var reservedLabels = []string{"namespace", "database", "pod", "job", "instance"}

var nameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// file is the YAML's shape: query name -> query. A field it lacks
// (postgres_exporter's master, cache_seconds) is refused by name rather than
// left unheeded.
type file map[string]struct {
	Query    string                 `yaml:"query"`
	Database string                 `yaml:"database"`
	Metrics  []map[string]rawColumn `yaml:"metrics"`
}

// rawColumn is a column's entry of a query's metrics.
type rawColumn struct {
	Usage       string `yaml:"usage"`
	Description string `yaml:"description"`
}

// Parse reads a file of queries; the error names the query and column of
// the first mistake.
func Parse(data []byte) ([]Query, error) {
	// YAML 1.2 (yaml.v3): a column named n, y, on or off is that name,
	// not a boolean as YAML 1.1 (sigs.k8s.io/yaml) would read it
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("not a file of queries (name: {query, metrics}): %w", err)
	}
	if len(f) > MaxQueries {
		return nil, fmt.Errorf("%d queries: at most %d", len(f), MaxQueries)
	}
	names := make([]string, 0, len(f))
	for name := range f {
		names = append(names, name)
	}
	slices.Sort(names)
	queries := make([]Query, 0, len(names))
	series := map[string]string{}
	for _, name := range names {
		raw := f[name]
		if !nameRE.MatchString(name) {
			return nil, fmt.Errorf("query %q: a name is letters, digits and _, not starting with a digit", name)
		}
		q := Query{Name: name, SQL: strings.TrimSpace(raw.Query), Database: raw.Database}
		if q.SQL == "" {
			return nil, fmt.Errorf("query %s: no query", name)
		}
		seen := map[string]bool{}
		metrics := 0
		for i, entry := range raw.Metrics {
			if len(entry) != 1 {
				return nil, fmt.Errorf("query %s: metrics[%d]: one column per entry (column: {usage, description})", name, i)
			}
			for col, c := range entry {
				usage := Usage(strings.ToUpper(c.Usage))
				switch {
				case !nameRE.MatchString(col):
					return nil, fmt.Errorf("query %s: column %q: a name is letters, digits and _, not starting with a digit", name, col)
				case seen[col]:
					return nil, fmt.Errorf("query %s: column %s twice", name, col)
				case !slices.Contains([]Usage{Label, Gauge, Counter, Discard}, usage):
					return nil, fmt.Errorf("query %s: column %s: usage %q: want LABEL, GAUGE, COUNTER or DISCARD", name, col, c.Usage)
				case usage == Label && slices.Contains(reservedLabels, col):
					return nil, fmt.Errorf("query %s: column %s: a label may not be %s (the manager and Prometheus set %s)",
						name, col, strings.Join(reservedLabels, ", "), col)
				}
				seen[col] = true
				column := Column{Name: col, Usage: usage, Description: c.Description}
				if usage == Gauge || usage == Counter {
					metrics++
					metric := q.MetricName(column)
					if other, ok := series[metric]; ok {
						return nil, fmt.Errorf("query %s: column %s: its series %s is also query %s's", name, col, metric, other)
					}
					series[metric] = name
				}
				q.Columns = append(q.Columns, column)
			}
		}
		if metrics == 0 {
			return nil, fmt.Errorf("query %s: no GAUGE or COUNTER column: it would report nothing", name)
		}
		queries = append(queries, q)
	}
	return queries, nil
}
