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
)

// MetricsOptions are what a scrape asks for beyond the default metrics.
type MetricsOptions struct {
	// TopStatements, above 0, adds the statements of pg_stat_statements
	// that took the most execution time (at most MaxTopStatements), read in
	// StatementsDatabase.
	TopStatements      int
	StatementsDatabase string
}

// query is o as GET MetricsPath's query string, "" for the defaults.
func (o MetricsOptions) query() string {
	if o.TopStatements <= 0 {
		return ""
	}
	v := url.Values{}
	v.Set(MetricsTopStatementsParam, strconv.Itoa(o.TopStatements))
	v.Set(MetricsStatementsDatabaseParam, o.StatementsDatabase)
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
	if o.TopStatements > 0 && (o.StatementsDatabase == "" || len(o.StatementsDatabase) > 63) {
		return o, fmt.Errorf("%s=%q: want the name of the database holding pg_stat_statements", MetricsStatementsDatabaseParam, o.StatementsDatabase)
	}
	return o, nil
}

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
