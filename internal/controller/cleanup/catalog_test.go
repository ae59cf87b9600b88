package cleanup

import (
	"context"
	"testing"

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

// TestFinalBackupWithCatalog: the final backup Job runs the image of the
// manager's catalog.
func TestFinalBackupWithCatalog(t *testing.T) {
	ctx := context.Background()
	catalog, err := engine.NewCatalog("mirror.example.com/dockerhub", "")
	require.NoError(t, err)
	db := facettest.Database()
	db.Spec.DeletionPolicy = dbv1.DeletionPolicyDelete
	db.Spec.Backup.BeforeDelete = true
	c := facettest.Client(t, db)
	r := newReconciler(c, facet.WriterFor(c, &events.FakeRecorder{}, Name).WhileDeleting())
	r.engines = catalog

	wait, err := r.finalBackup(ctx, db)
	require.NoError(t, err)
	require.NotNil(t, wait, "the final backup has not run yet")
	job := &batchv1.Job{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: resources.FinalBackupJobName(db)}, job))
	assert.Equal(t, "mirror.example.com/dockerhub/postgres:17.12", job.Spec.Template.Spec.Containers[0].Image)
}
