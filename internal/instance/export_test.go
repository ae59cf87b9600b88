package instance

import (
	"context"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// MetricsOptions exposes PodAgents.metricsOptions to the tests.
func (a PodAgents) MetricsOptions(ctx context.Context, db *dbv1.Database) (agentapi.MetricsOptions, error) {
	return a.metricsOptions(ctx, db)
}
