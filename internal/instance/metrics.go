package instance

import (
	"context"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// agentMetricsTimeout bounds one scrape of an agent's metrics: the agent
// reads its server within 4 s, and a server that does not answer is
// reported down, not waited for.
const agentMetricsTimeout = 10 * time.Second

// Metrics returns the metric families the agent of pod serves
// (agentapi.MetricsPath), reached as every other call: at the pod's IP,
// verified with the Database's CA, with the agents' token.
func (a PodAgents) Metrics(ctx context.Context, db *dbv1.Database, pod *corev1.Pod) (map[string]*dto.MetricFamily, error) {
	return call(ctx, a, db, pod, agentMetricsTimeout, agentapi.Client.Metrics)
}
