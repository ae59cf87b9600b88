package agentapi

import (
	"bytes"
	"context"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// MetricsLimit bounds the exposition of GET MetricsPath: about 50 series
// and a few per database take some kilobytes; a longer answer is refused
// rather than held in the manager's memory.
const MetricsLimit = 4 << 20

// metricsAccept asks for Prometheus' text format, version 0.0.4 (what the
// agent's promhttp handler answers by default too).
const metricsAccept = "text/plain;version=0.0.4;q=1,*/*;q=0.1"

// MaxTopStatements bounds MetricsOptions.TopStatements (and the Database's
// spec.monitoring.topStatements): each statement is three series.
const MaxTopStatements = 100

// The query parameters of GET MetricsPath.
const (
	// MetricsTopStatementsParam asks for the N statements of
	// pg_stat_statements that took the most execution time.
	MetricsTopStatementsParam = "topStatements"
	// MetricsStatementsDatabaseParam names the database where the
	// pg_stat_statements extension is created (its view reports the
	// statements of every database).
	MetricsStatementsDatabaseParam = "statementsDatabase"
	// MetricsQueriesUserParam asks for the user-defined queries
	// (CustomQueriesDir), run as this role: the application's.
	MetricsQueriesUserParam = "queriesUser"
	// MetricsQueriesDatabaseParam is the database the user-defined
	// queries run in when they name none: the application's.
	MetricsQueriesDatabaseParam = "queriesDatabase"
)

// MetricsOptions are what a scrape asks for beyond the default metrics.
type MetricsOptions struct {
	// TopStatements, above 0, adds the statements of pg_stat_statements
	// that took the most execution time (at most MaxTopStatements), read in
	// StatementsDatabase.
	TopStatements      int
	StatementsDatabase string
	// QueriesUser, when set, adds the user-defined queries, run as this
	// role, by default in QueriesDatabase.
	QueriesUser     string
	QueriesDatabase string
}

// query is o as GET MetricsPath's query string, "" for the defaults.
func (o MetricsOptions) query() string {
	v := url.Values{}
	if o.TopStatements > 0 {
		v.Set(MetricsTopStatementsParam, strconv.Itoa(o.TopStatements))
		v.Set(MetricsStatementsDatabaseParam, o.StatementsDatabase)
	}
	if o.QueriesUser != "" {
		v.Set(MetricsQueriesUserParam, o.QueriesUser)
		v.Set(MetricsQueriesDatabaseParam, o.QueriesDatabase)
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}

// ParseMetricsOptions reads the options of a GET MetricsPath's query; a
// value out of range is an error that names the parameter.
func ParseMetricsOptions(q url.Values) (MetricsOptions, error) {
	var o MetricsOptions
	if s := q.Get(MetricsTopStatementsParam); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > MaxTopStatements {
			return o, fmt.Errorf("%s=%q: want a number from 0 to %d", MetricsTopStatementsParam, s, MaxTopStatements)
		}
		o.TopStatements = n
	}
	o.StatementsDatabase = q.Get(MetricsStatementsDatabaseParam)
	if o.TopStatements > 0 && !identifier(o.StatementsDatabase) {
		return o, fmt.Errorf("%s=%q: want the name of the database holding pg_stat_statements", MetricsStatementsDatabaseParam, o.StatementsDatabase)
	}
	o.QueriesUser, o.QueriesDatabase = q.Get(MetricsQueriesUserParam), q.Get(MetricsQueriesDatabaseParam)
	if o.QueriesUser != "" && !identifier(o.QueriesUser) {
		return o, fmt.Errorf("%s=%q: want a role's name", MetricsQueriesUserParam, o.QueriesUser)
	}
	if o.QueriesUser != "" && !identifier(o.QueriesDatabase) {
		return o, fmt.Errorf("%s=%q: want a database's name", MetricsQueriesDatabaseParam, o.QueriesDatabase)
	}
	return o, nil
}

// identifier says whether s may name a role or a database: 1 to 63 bytes.
func identifier(s string) bool { return s != "" && len(s) <= 63 }

// Metrics returns the metric families the agent serves at MetricsPath,
// by name: the PostgreSQL metrics of its instance, with what o asks for.
func (c Client) Metrics(ctx context.Context, baseURL string, o MetricsOptions) (map[string]*dto.MetricFamily, error) {
	url := baseURL + MetricsPath + o.query()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	req.Header.Set("Accept", metricsAccept)
	b, header, err := c.send(req, MetricsLimit+1)
	if err != nil {
		return nil, err
	}
	if len(b) > MetricsLimit {
		return nil, fmt.Errorf("GET %s: the answer is longer than %d bytes", url, MetricsLimit)
	}
	if ct := header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "text/plain" {
			return nil, fmt.Errorf("GET %s: the answer is %q, not Prometheus' text format", url, ct)
		}
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("GET %s: parsing the answer: %w", url, err)
	}
	return families, nil
}
