package backup

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestSyncWithCatalog: the backup CronJob and an on-demand backup Job run
// the image of the manager's catalog.
func TestSyncWithCatalog(t *testing.T) {
	ctx := context.Background()
	catalog, err := engine.NewCatalog("", "postgres:17=localhost/dbkeeper/postgres:17")
	require.NoError(t, err)
	db := facettest.Database()
	db.Annotations = map[string]string{dbv1.AnnotationBackupNow: "t1"}
	c := facettest.Client(t, db)
	s := newSyncer(c, facet.WriterFor(c, &events.FakeRecorder{}, Name), func() time.Time { return t0 })
	s.engines = catalog

	_, err = s.Sync(ctx, db)
	require.NoError(t, err)
	cron := &batchv1.CronJob{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: resources.BackupName(db)}, cron))
	assert.Equal(t, "localhost/dbkeeper/postgres:17", cron.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Image)
	job := &batchv1.Job{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: resources.OnDemandBackupJobName(db, "t1")}, job))
	assert.Equal(t, "localhost/dbkeeper/postgres:17", job.Spec.Template.Spec.Containers[0].Image)
}
