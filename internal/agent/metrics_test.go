package agent

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/test/framework"
)

// TestMetricsWithoutAServer: with no server on the socket (an instance
// waiting for its bootstrap, or restarting) a scrape succeeds at once
// with up 0 and the data volume's bytes, and nothing else.
func TestMetricsWithoutAServer(t *testing.T) {
	port, err := framework.FreePort()
	require.NoError(t, err)
	dir := t.TempDir()
	cfg := Config{PGData: filepath.Join(dir, "data"), SocketDir: t.TempDir(), Port: port, User: "postgres"}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(newAgent(context.Background(), cfg, testr.New(t)).metricsCollector())

	start := time.Now()
	families, err := reg.Gather()
	took := time.Since(start)
	require.NoError(t, err)
	assert.Less(t, took, time.Second, "a refused connection is not waited for")
	var names []string
	values := map[string]float64{}
	for _, f := range families {
		require.Len(t, f.GetMetric(), 1, f.GetName())
		names = append(names, f.GetName())
		values[f.GetName()] = f.GetMetric()[0].GetGauge().GetValue()
	}
	assert.Equal(t, []string{"dbkeeper_postgres_up", "dbkeeper_postgres_volume_free_bytes", "dbkeeper_postgres_volume_used_bytes"},
		names, "Gather sorts the families by name")
	assert.Zero(t, values["dbkeeper_postgres_up"])
	assert.Positive(t, values["dbkeeper_postgres_volume_free_bytes"])
	size, err := volumeSize(dir)
	require.NoError(t, err)
	used, free := values["dbkeeper_postgres_volume_used_bytes"], values["dbkeeper_postgres_volume_free_bytes"]
	assert.Equal(t, float64(size), used+free, "used and free make the volume's size")
}

// TestMetricsCheckpointsByVersion: PostgreSQL 17 moved the checkpoint
// counts from pg_stat_bgwriter to pg_stat_checkpointer, under new names
// and with a standby's restartpoints apart; the collector reads each
// server where its version keeps them, restartpoints counted as before.
func TestMetricsCheckpointsByVersion(t *testing.T) {
	for version, want := range map[int]string{
		150008: "checkpoints_timed::float8, checkpoints_req::float8 FROM pg_stat_bgwriter",
		160004: "checkpoints_timed::float8, checkpoints_req::float8 FROM pg_stat_bgwriter",
		170000: "(num_timed + restartpoints_timed)::float8, (num_requested + restartpoints_req)::float8\n\tFROM pg_stat_checkpointer",
		180001: "(num_timed + restartpoints_timed)::float8, (num_requested + restartpoints_req)::float8\n\tFROM pg_stat_checkpointer",
	} {
		assert.Contains(t, metricsCheckpointsSQL(version), want, "server_version_num %d", version)
	}
}
