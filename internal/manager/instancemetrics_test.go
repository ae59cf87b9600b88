package manager

import (
	"context"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/instance/agentstest"
)

// agentsWithMetrics is a stand-in of the agents that serves metrics.
type agentsWithMetrics struct{ instance.Agents }

func (agentsWithMetrics) Metrics(context.Context, *dbv1.Database, *corev1.Pod) (map[string]*dto.MetricFamily, error) {
	return nil, nil
}

// TestInstanceMetricsSource: the manager scrapes the agents at the pods'
// IPs every --instance-metrics-interval, or through a stand-in of the
// agents that serves metrics; not at all with no interval, with /metrics
// off, or with a stand-in that serves none (envtest, kwok).
func TestInstanceMetricsSource(t *testing.T) {
	on := Options{InstanceMetricsInterval: 15 * time.Second, MetricsBindAddress: ":8080"}
	assert.IsType(t, instance.PodAgents{}, instanceMetricsSource(on, nil))

	withMetrics := on
	withMetrics.Agents = agentsWithMetrics{agentstest.New()}
	assert.Equal(t, withMetrics.Agents, instanceMetricsSource(withMetrics, nil))

	for name, o := range map[string]Options{
		"no interval":             {MetricsBindAddress: ":8080"},
		"no /metrics":             {InstanceMetricsInterval: 15 * time.Second, MetricsBindAddress: "0"},
		"a stand-in without them": {InstanceMetricsInterval: 15 * time.Second, MetricsBindAddress: ":8080", Agents: agentstest.New()},
	} {
		assert.Nil(t, instanceMetricsSource(o, nil), name)
	}
}
