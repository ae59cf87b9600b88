package integration

import (
	"context"
	"testing"

	"github.com/go-logr/zapr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/logging"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/operator"
)

// TestEngineCatalog: a manager started with an image catalog runs its
// images in the StatefulSets and backup CronJobs, the per-version image
// winning over the registry prefix, and a Database's spec.image over both.
func TestEngineCatalog(t *testing.T) {
	ns := newNamespace(t)
	catalog, err := engine.NewCatalog("mirror.example.com/dockerhub", "postgres:15=localhost/dbkeeper/postgres:15")
	require.NoError(t, err)
	operator.Start(t, operatorCfg, operator.Options{
		Namespaces: []string{ns},
		Logger:     logging.Capped(zapr.NewLogger(newCapturingLogger("operator"))),
		Engines:    catalog,
	})
	want := map[string]string{
		"moved":  "mirror.example.com/dockerhub/postgres:17.12",
		"pinned": "localhost/dbkeeper/postgres:15",
		"own":    "registry.example.com/postgres:16.10-custom",
	}
	createDatabase(t, newDatabase(ns, "moved"))
	createDatabase(t, newDatabase(ns, "pinned", func(db *dbv1.Database) { db.Spec.Version = "15" }))
	createDatabase(t, newDatabase(ns, "own", func(db *dbv1.Database) {
		db.Spec.Version = "16"
		db.Spec.Image = want["own"]
	}))

	ctx := context.Background()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for name, image := range want {
			db := &dbv1.Database{}
			db.Name, db.Namespace = name, ns
			sts := &appsv1.StatefulSet{}
			if assert.NoError(c, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.StatefulSetName(db)}, sts)) {
				assert.Equal(c, image, sts.Spec.Template.Spec.Containers[0].Image, "StatefulSet %s", name)
			}
			cron := &batchv1.CronJob{}
			if assert.NoError(c, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.BackupName(db)}, cron)) {
				assert.Equal(c, image, cron.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Image, "CronJob %s", name)
			}
		}
	}, timeout, tick)
}
