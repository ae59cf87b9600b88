package facet

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
)

// TestWriterApplyCondition: a condition is written with its Event when its
// status changes, and only then; a status the Database already has from
// this Writer is not written again; a Database that is gone is no error.
func TestWriterApplyCondition(t *testing.T) {
	ctx := context.Background()
	db := facettest.Database()
	db.Finalizers = nil // so that Delete removes it
	c := facettest.Client(t, db)
	rec := events.NewFakeRecorder(10)
	w := WriterFor(c, rec, "service")
	live := func() *dbv1.Database {
		got := &dbv1.Database{}
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(db), got))
		return got
	}
	ready := conditions.True(dbv1.ConditionServiceReady, dbv1.ReasonServicesReady, "in place")

	require.NoError(t, w.ApplyCondition(ctx, live(), ready, dbv1ac.DatabaseStatus().WithEndpoint("orders.shop.svc:5432")))
	require.Len(t, rec.Events, 1)
	assert.Contains(t, <-rec.Events, "Normal "+dbv1.ReasonServicesReady)
	written := live()
	assert.Equal(t, "orders.shop.svc:5432", written.Status.Endpoint)

	require.NoError(t, w.ApplyCondition(ctx, written, ready, dbv1ac.DatabaseStatus().WithEndpoint("orders.shop.svc:5432")))
	assert.Equal(t, written.ResourceVersion, live().ResourceVersion, "the same status written again")
	assert.Empty(t, rec.Events)

	failed := conditions.False(dbv1.ConditionServiceReady, dbv1.ReasonApplyFailed, "refused")
	require.NoError(t, w.ApplyCondition(ctx, live(), failed, nil))
	require.Len(t, rec.Events, 1)
	assert.Contains(t, <-rec.Events, "Warning "+dbv1.ReasonApplyFailed)

	require.NoError(t, c.Delete(ctx, live()))
	require.True(t, apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(db), &dbv1.Database{})))
	require.NoError(t, w.ApplyCondition(ctx, written, ready, nil), "a Database that is gone")
	require.NoError(t, w.ApplyStatus(ctx, written, dbv1ac.DatabaseStatus().WithEndpoint("x")), "a Database that is gone")
}

// TestWriterApplyChecksTheOwner: an apply that would write a child naming
// a Database that is being deleted, or gone, or replaced by one of the
// same name, is not sent; the cleanup controller's Writer (WhileDeleting)
// sends it; a child without a Database owner is written.
func TestWriterApplyChecksTheOwner(t *testing.T) {
	ctx := context.Background()
	db := facettest.Database()
	c := facettest.Client(t, db)
	w := WriterFor(c, events.NewFakeRecorder(10), "service")
	owned := func(name string, uid types.UID) *corev1ac.ConfigMapApplyConfiguration {
		return corev1ac.ConfigMap(name, db.Namespace).WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(dbv1.GroupVersion.String()).WithKind("Database").WithName(db.Name).WithUID(uid).WithController(true))
	}
	exists := func(name string) bool {
		err := c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.ConfigMap{})
		require.True(t, err == nil || apierrors.IsNotFound(err), err)
		return err == nil
	}

	_, err := w.Apply(ctx, nil, owned("alive", db.UID))
	require.NoError(t, err)
	assert.True(t, exists("alive"))
	_, err = w.Apply(ctx, nil, owned("replaced", "an-earlier-uid"))
	require.ErrorIs(t, err, ErrOwnerDeleted)
	assert.False(t, exists("replaced"), "written for a Database of the same name that is gone")

	require.NoError(t, c.Delete(ctx, db))
	_, err = w.Apply(ctx, nil, owned("deleting", db.UID))
	require.ErrorIs(t, err, ErrOwnerDeleted)
	assert.False(t, exists("deleting"), "written for a Database being deleted")
	_, err = w.WhileDeleting().Apply(ctx, nil, owned("final-backup", db.UID))
	require.NoError(t, err)
	assert.True(t, exists("final-backup"), "the cleanup controller writes while the Database is being deleted")

	live := &dbv1.Database{}
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(db), live))
	live.Finalizers = nil
	require.NoError(t, c.Update(ctx, live))
	_, err = w.Apply(ctx, nil, owned("gone", db.UID))
	require.ErrorIs(t, err, ErrOwnerDeleted)
	assert.False(t, exists("gone"))
	_, err = w.Apply(ctx, nil, corev1ac.ConfigMap("unowned", db.Namespace))
	require.NoError(t, err)
	assert.True(t, exists("unowned"))
}
