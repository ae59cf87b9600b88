package customqueries_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/customqueries"
)

// TestParse reads a file in postgres_exporter's format: the queries by
// name, their columns in order, their series' names.
func TestParse(t *testing.T) {
	queries, err := customqueries.Parse([]byte(`
pending_jobs:
  query: |
    SELECT queue, count(*) AS jobs, max(age) AS oldest FROM jobs GROUP BY queue
  metrics:
    - queue:
        usage: LABEL
        description: The queue.
    - jobs:
        usage: GAUGE
        description: Jobs not done.
    - oldest:
        usage: discard
archive:
  database: postgres
  query: SELECT archived_count FROM pg_stat_archiver
  metrics:
    - archived_count:
        usage: COUNTER
        description: Segments archived.
`))
	require.NoError(t, err)
	require.Len(t, queries, 2)
	assert.Equal(t, customqueries.Query{Name: "archive", Database: "postgres", SQL: "SELECT archived_count FROM pg_stat_archiver",
		Columns: []customqueries.Column{{Name: "archived_count", Usage: customqueries.Counter, Description: "Segments archived."}}}, queries[0])
	q := queries[1]
	assert.Equal(t, "pending_jobs", q.Name)
	assert.Equal(t, "SELECT queue, count(*) AS jobs, max(age) AS oldest FROM jobs GROUP BY queue", q.SQL)
	assert.Equal(t, []string{"queue"}, q.Labels())
	assert.Equal(t, []customqueries.Column{{Name: "queue", Usage: customqueries.Label, Description: "The queue."},
		{Name: "jobs", Usage: customqueries.Gauge, Description: "Jobs not done."}, {Name: "oldest", Usage: customqueries.Discard}}, q.Columns)
	assert.Equal(t, "dbkeeper_postgres_custom_pending_jobs_jobs", q.MetricName(q.Columns[1]))

	// YAML 1.1 would read these names as booleans
	queries, err = customqueries.Parse([]byte("q:\n  query: SELECT 1\n  metrics: [{n: {usage: GAUGE}}, {on: {usage: LABEL}}, {y: {usage: COUNTER}}]"))
	require.NoError(t, err)
	assert.Equal(t, []string{"on"}, queries[0].Labels())
	assert.Equal(t, "n", queries[0].Columns[0].Name)
}

// TestParseRefuses: each mistake is refused, naming the query and column.
func TestParseRefuses(t *testing.T) {
	for name, c := range map[string]struct{ file, want string }{
		"not YAML":         {"a: [", "not a file of queries"},
		"an unknown field": {"q:\n  query: SELECT 1\n  master: true\n  metrics: [{v: {usage: GAUGE}}]", "field master not found"},
		"a bad name":       {"1q:\n  query: SELECT 1\n  metrics: [{v: {usage: GAUGE}}]", `query "1q": a name is`},
		"no query":         {"q:\n  metrics: [{v: {usage: GAUGE}}]", "query q: no query"},
		"two columns":      {"q:\n  query: SELECT 1\n  metrics: [{v: {usage: GAUGE}, w: {usage: GAUGE}}]", "query q: metrics[0]: one column per entry"},
		"a bad column":     {"q:\n  query: SELECT 1\n  metrics: [{v-x: {usage: GAUGE}}]", `query q: column "v-x"`},
		"a column twice":   {"q:\n  query: SELECT 1\n  metrics: [{v: {usage: GAUGE}}, {v: {usage: LABEL}}]", "query q: column v twice"},
		"a bad usage":      {"q:\n  query: SELECT 1\n  metrics: [{v: {usage: HISTOGRAM}}]", `query q: column v: usage "HISTOGRAM"`},
		"a reserved label": {"q:\n  query: SELECT 1\n  metrics: [{pod: {usage: LABEL}}, {v: {usage: GAUGE}}]", "query q: column pod: a label may not be"},
		"no metric":        {"q:\n  query: SELECT 1\n  metrics: [{v: {usage: LABEL}}]", "query q: no GAUGE or COUNTER column"},
		"a series twice": {"a:\n  query: SELECT 1\n  metrics: [{b_c: {usage: GAUGE}}]\na_b:\n  query: SELECT 1\n  metrics: [{c: {usage: GAUGE}}]",
			"query a_b: column c: its series dbkeeper_postgres_custom_a_b_c is also query a's"},
	} {
		_, err := customqueries.Parse([]byte(c.file))
		if assert.Error(t, err, name) {
			assert.Contains(t, err.Error(), c.want, name)
		}
	}
	many := ""
	for i := range customqueries.MaxQueries + 1 {
		many += "q" + string(rune('a'+i/26)) + string(rune('a'+i%26)) + ":\n  query: SELECT 1\n  metrics: [{v: {usage: GAUGE}}]\n"
	}
	_, err := customqueries.Parse([]byte(many))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "51 queries: at most 50")
}
