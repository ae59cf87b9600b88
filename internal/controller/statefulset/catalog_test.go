package statefulset

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestSyncWithCatalog: the StatefulSet runs the image of the manager's
// catalog, and spec.image wins over it.
func TestSyncWithCatalog(t *testing.T) {
	ctx := context.Background()
	catalog, err := engine.NewCatalog("mirror.example.com/dockerhub", "")
	require.NoError(t, err)
	db := facettest.Database()
	c := facettest.Client(t, db)
	s := newSyncer(c, facet.WriterFor(c, &events.FakeRecorder{}, Name))
	s.engines = catalog
	image := func() string {
		sts := &appsv1.StatefulSet{}
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: resources.StatefulSetName(db)}, sts))
		return sts.Spec.Template.Spec.Containers[0].Image
	}

	_, err = s.Sync(ctx, db)
	require.NoError(t, err)
	assert.Equal(t, "mirror.example.com/dockerhub/postgres:17.12", image())

	db.Spec.Image = "registry.example.com/postgres:17.6-custom"
	_, err = s.Sync(ctx, db)
	require.NoError(t, err)
	assert.Equal(t, "registry.example.com/postgres:17.6-custom", image())
}
