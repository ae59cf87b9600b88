package agent

import (
	"context"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
)

// NewMetricsCollector is the agent's collector of PostgreSQL metrics
// (metricsCollector) for the tests of package agent_test, whose agents run
// as child processes: it reads the server cfg names (PGData, SocketDir,
// Port, User) as that server's agent does.
func NewMetricsCollector(cfg Config, log logr.Logger) prometheus.Collector {
	return newAgent(context.Background(), cfg, log).metricsCollector()
}
