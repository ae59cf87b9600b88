package tls

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// applyHBA keeps the ConfigMap of the authentication rules.
func (s *syncer) applyHBA(ctx context.Context, db *dbv1.Database, eng engine.Engine) error {
	name := resources.HBAConfigMapName(db)
	live, err := apply.Live(ctx, s.client, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.ConfigMap{})
	if err != nil {
		return fmt.Errorf("getting ConfigMap %s: %w", name, err)
	}
	if _, err := s.writer.Apply(ctx, live, resources.HBAConfigMap(db, eng)); err != nil {
		return fmt.Errorf("applying ConfigMap %s: %w", name, err)
	}
	return nil
}
