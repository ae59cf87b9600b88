package agent

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/test/framework"
)

// TestMetricsEndpointNeedsTheToken: GET /metrics without the agents'
// token, or with another, is refused (401) as every path but the probes';
// with it, the collector's series are served in Prometheus' text format,
// which agentapi.Client.Metrics reads (here a server that does not run:
// up 0 and the volume).
func TestMetricsEndpointNeedsTheToken(t *testing.T) {
	port, err := framework.FreePort()
	require.NoError(t, err)
	cfg := Config{Listen: "127.0.0.1:0", PGData: filepath.Join(t.TempDir(), "data"), SocketDir: t.TempDir(), Port: port,
		User: "postgres", Token: "tok"}
	a := newAgent(context.Background(), cfg, testr.New(t))
	hs, err := a.listen()
	require.NoError(t, err)
	srv := httptest.NewServer(hs.Handler)
	defer srv.Close()

	get := func(authorization string) (*http.Response, string) {
		req, err := http.NewRequest(http.MethodGet, srv.URL+agentapi.MetricsPath, nil)
		require.NoError(t, err)
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(body)
	}
	for name, authorization := range map[string]string{"no token": "", "another token": "Bearer other", "not a bearer token": "tok"} {
		resp, body := get(authorization)
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, name)
		assert.NotContains(t, body, "dbkeeper_postgres_", name)
	}
	resp, body := get("Bearer tok")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, resp.Header.Get("Content-Type"), "text/plain")
	assert.Contains(t, body, "\ndbkeeper_postgres_up 0\n")

	families, err := agentapi.Client{HTTP: srv.Client(), Token: "tok"}.Metrics(context.Background(), srv.URL, agentapi.MetricsOptions{})
	require.NoError(t, err)
	require.Contains(t, families, "dbkeeper_postgres_up")
	assert.Zero(t, families["dbkeeper_postgres_up"].GetMetric()[0].GetGauge().GetValue())
	assert.Contains(t, families, "dbkeeper_postgres_volume_free_bytes")

	_, err = agentapi.Client{HTTP: srv.Client(), Token: "other"}.Metrics(context.Background(), srv.URL, agentapi.MetricsOptions{})
	var refused *agentapi.Error
	require.True(t, errors.As(err, &refused), "got %v", err)
	assert.Equal(t, http.StatusUnauthorized, refused.Code)

	// an agent without a token lets nobody through
	a.cfg.Token = ""
	hs, err = a.listen()
	require.NoError(t, err)
	open := httptest.NewServer(hs.Handler)
	defer open.Close()
	_, err = agentapi.Client{HTTP: open.Client(), Token: ""}.Metrics(context.Background(), open.URL, agentapi.MetricsOptions{})
	require.True(t, errors.As(err, &refused), "got %v", err)
	assert.Equal(t, http.StatusUnauthorized, refused.Code)
}
