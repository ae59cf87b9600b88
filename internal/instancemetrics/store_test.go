package instancemetrics

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func parse(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	families, err := p.TextToMetricFamilies(strings.NewReader(text))
	require.NoError(t, err)
	return families
}

// TestStoreNeverFailsAGather: what agents of different versions or a
// faulty one could serve never makes the manager's /metrics fail (it
// answers 500 on any error of a gather): a family served with another
// type by a second instance is left out for it, another help text gives
// way to the first, a repeated series, a repeated label and the
// histograms are left out.
func TestStoreNeverFailsAGather(t *testing.T) {
	s := NewStore()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s)
	a, b := Target{"shop", "orders", "orders-0"}, Target{"shop", "orders", "orders-1"}
	s.Record(a, parse(t, `# HELP dbkeeper_postgres_locks_waiting Locks.
# TYPE dbkeeper_postgres_locks_waiting gauge
dbkeeper_postgres_locks_waiting 1
# HELP dbkeeper_postgres_connections Client backends by state.
# TYPE dbkeeper_postgres_connections gauge
dbkeeper_postgres_connections{state="idle"} 2
dbkeeper_postgres_connections{state="idle"} 3
dbkeeper_postgres_connections{state="active"} 1
# TYPE dbkeeper_postgres_seconds histogram
dbkeeper_postgres_seconds_bucket{le="+Inf"} 1
dbkeeper_postgres_seconds_sum 1
dbkeeper_postgres_seconds_count 1
`), nil)
	second := parse(t, `# HELP dbkeeper_postgres_locks_waiting Locks, in locks.
# TYPE dbkeeper_postgres_locks_waiting counter
dbkeeper_postgres_locks_waiting 5
# HELP dbkeeper_postgres_connections Connections.
# TYPE dbkeeper_postgres_connections gauge
dbkeeper_postgres_connections{state="idle"} 4
`)
	// the text parser refuses a repeated label; a faulty Source need not
	conns := second["dbkeeper_postgres_connections"]
	conns.Metric = append(conns.Metric, &dto.Metric{Gauge: &dto.Gauge{Value: new(4.0)},
		Label: []*dto.LabelPair{{Name: new("state"), Value: new("idle")}, {Name: new("state"), Value: new("active")}}})
	s.Record(b, second, nil)
	families, err := reg.Gather()
	require.NoError(t, err)
	byName := map[string]*dto.MetricFamily{}
	for _, f := range families {
		byName[f.GetName()] = f
	}
	require.Contains(t, byName, "dbkeeper_postgres_locks_waiting")
	locks := byName["dbkeeper_postgres_locks_waiting"]
	assert.Len(t, locks.GetMetric(), 1, "the counter of orders-1 is left out")
	assert.Equal(t, dto.MetricType_GAUGE, locks.GetType(), "orders-0's type")
	assert.Equal(t, "Locks.", locks.GetHelp())
	assert.Len(t, byName["dbkeeper_postgres_connections"].GetMetric(), 3, "orders-0: idle (the first) and active; orders-1: idle")
	assert.Equal(t, "Client backends by state.", byName["dbkeeper_postgres_connections"].GetHelp(), "orders-0's help")
	assert.NotContains(t, byName, "dbkeeper_postgres_seconds")
	assert.NotContains(t, byName, "dbkeeper_postgres_seconds_bucket")
}

// TestStoreForgets: a failed scrape keeps the last values once, the second
// in a row drops them; Keep drops the instances not named, Reset every
// one; Record says how many scrapes had failed in a row before.
func TestStoreForgets(t *testing.T) {
	s := NewStore()
	a, b := Target{"shop", "orders", "orders-0"}, Target{"shop", "orders", "orders-1"}
	up := parse(t, "# TYPE dbkeeper_postgres_up gauge\ndbkeeper_postgres_up 1\n")
	assert.Zero(t, s.Record(a, up, nil))
	assert.Zero(t, s.Record(b, up, nil))
	assert.Equal(t, 2, testutil.CollectAndCount(s, "dbkeeper_postgres_up"))

	failed := errors.New("refused")
	assert.Zero(t, s.Record(b, nil, failed))
	assert.Equal(t, 2, testutil.CollectAndCount(s, "dbkeeper_postgres_up"), "one failure keeps the last values")
	assert.Equal(t, 1, s.Record(b, nil, failed))
	assert.Equal(t, 1, testutil.CollectAndCount(s, "dbkeeper_postgres_up"), "two drop them")
	assert.Equal(t, 2, testutil.CollectAndCount(s, "dbkeeper_instance_scrape_up"))
	assert.Equal(t, 2, s.Record(b, up, nil))
	assert.Equal(t, 2, testutil.CollectAndCount(s, "dbkeeper_postgres_up"))

	s.Keep([]Target{b})
	assert.Equal(t, 1, testutil.CollectAndCount(s, "dbkeeper_instance_scrape_up"))
	assert.Equal(t, 1, testutil.CollectAndCount(s, "dbkeeper_postgres_up"))
	s.Reset()
	assert.Zero(t, testutil.CollectAndCount(s))
}
