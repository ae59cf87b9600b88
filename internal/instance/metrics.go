package instance

import (
	"context"
	"fmt"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// agentMetricsTimeout bounds one scrape of an agent's metrics: the agent
// reads its server within 4 s, and a server that does not answer is
// reported down, not waited for.
const agentMetricsTimeout = 10 * time.Second

// Metrics returns the metric families the agent of pod serves
// (agentapi.MetricsPath), reached as every other call: at the pod's IP,
// verified with the Database's CA, with the agents' token; with the top
// statements of spec.monitoring.topStatements, read in the application's
// database (the credentials Secret names it), where the extensions
// controller creates pg_stat_statements.
func (a PodAgents) Metrics(ctx context.Context, db *dbv1.Database, pod *corev1.Pod) (map[string]*dto.MetricFamily, error) {
	o, err := a.metricsOptions(ctx, db)
	if err != nil {
		return nil, err
	}
	return call(ctx, a, db, pod, agentMetricsTimeout, func(c agentapi.Client, ctx context.Context, base string) (map[string]*dto.MetricFamily, error) {
		return c.Metrics(ctx, base, o)
	})
}

// metricsOptions are the options of a scrape of db's agents: its top
// statements, read in the application's database, and its user-defined
// queries, run as the application's role (the credentials Secret names
// both).
func (a PodAgents) metricsOptions(ctx context.Context, db *dbv1.Database) (agentapi.MetricsOptions, error) {
	m := db.Spec.Monitoring
	if m.TopStatements <= 0 && m.CustomQueries == nil {
		return agentapi.MetricsOptions{}, nil
	}
	if a.Secrets == nil {
		return agentapi.MetricsOptions{}, fmt.Errorf("no reader for Secret %s", resources.CredentialsSecretName(db))
	}
	role, database, err := Application(ctx, a.Secrets, db)
	if err != nil {
		return agentapi.MetricsOptions{}, fmt.Errorf("the role and database of spec.monitoring: %w", err)
	}
	var o agentapi.MetricsOptions
	if m.TopStatements > 0 {
		o.TopStatements, o.StatementsDatabase = min(int(m.TopStatements), agentapi.MaxTopStatements), database
	}
	if m.CustomQueries != nil {
		o.QueriesUser, o.QueriesDatabase = role, database
	}
	return o, nil
}
