package agentapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClientMetrics: Metrics sends the token, asks for the text format and
// parses it; an answer in another format, one longer than MetricsLimit,
// or one that does not parse is an error, a refusal an *Error.
func TestClientMetrics(t *testing.T) {
	var answer func(w http.ResponseWriter)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != MetricsPath || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		assert.Contains(t, r.Header.Get("Accept"), "text/plain;version=0.0.4")
		answer(w)
	}))
	defer srv.Close()
	c := Client{HTTP: srv.Client(), Token: "tok"}
	text := func(body string) func(http.ResponseWriter) {
		return func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
			_, _ = w.Write([]byte(body))
		}
	}

	answer = text("# HELP dbkeeper_postgres_up Up.\n# TYPE dbkeeper_postgres_up gauge\ndbkeeper_postgres_up 1\n" +
		"# TYPE dbkeeper_postgres_connections gauge\ndbkeeper_postgres_connections{state=\"idle\"} 3\n")
	families, err := c.Metrics(context.Background(), srv.URL, MetricsOptions{})
	require.NoError(t, err)
	assert.Equal(t, 1.0, families["dbkeeper_postgres_up"].GetMetric()[0].GetGauge().GetValue())
	assert.Equal(t, "Up.", families["dbkeeper_postgres_up"].GetHelp())
	assert.Equal(t, 3.0, families["dbkeeper_postgres_connections"].GetMetric()[0].GetGauge().GetValue())

	for name, a := range map[string]func(http.ResponseWriter){
		"json": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte("{}"))
		},
		"too long":       text("# TYPE x gauge\n" + strings.Repeat("x 1\n", MetricsLimit/4+1)),
		"not the format": text("dbkeeper_postgres_up{ 1\n"),
	} {
		answer = a
		_, err := c.Metrics(context.Background(), srv.URL, MetricsOptions{})
		assert.Error(t, err, name)
	}

	_, err = Client{HTTP: srv.Client(), Token: "other"}.Metrics(context.Background(), srv.URL, MetricsOptions{})
	var refused *Error
	require.ErrorAs(t, err, &refused)
	assert.Equal(t, http.StatusUnauthorized, refused.Code)
}

// TestMetricsOptionsRoundTrip: what the manager asks for is what the agent
// reads; a number out of range, or top statements without their database,
// is refused naming the parameter.
func TestMetricsOptionsRoundTrip(t *testing.T) {
	for _, o := range []MetricsOptions{{}, {TopStatements: 10, StatementsDatabase: "app db"}, {TopStatements: MaxTopStatements, StatementsDatabase: "x"},
		{QueriesUser: "shop", QueriesDatabase: "orders"}, {TopStatements: 1, StatementsDatabase: "a", QueriesUser: "b", QueriesDatabase: "c"}} {
		q, err := url.ParseQuery(strings.TrimPrefix(o.query(), "?"))
		require.NoError(t, err)
		got, err := ParseMetricsOptions(q)
		require.NoError(t, err)
		assert.Equal(t, o, got)
	}
	for query, param := range map[string]string{
		"topStatements=101&statementsDatabase=app": MetricsTopStatementsParam,
		"topStatements=-1&statementsDatabase=app":  MetricsTopStatementsParam,
		"topStatements=ten&statementsDatabase=app": MetricsTopStatementsParam,
		"topStatements=5":                          MetricsStatementsDatabaseParam,
		"queriesUser=shop":                         MetricsQueriesDatabaseParam,
	} {
		q, err := url.ParseQuery(query)
		require.NoError(t, err)
		_, err = ParseMetricsOptions(q)
		require.Error(t, err, query)
		assert.Contains(t, err.Error(), param, query)
	}
}
