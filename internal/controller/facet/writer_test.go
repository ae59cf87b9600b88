package facet

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/resources"
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

// TestWriterApplyLeavesWhatIsNotOurs: an apply naming a Database as
// controller is not sent over an object of that name the Database does not
// own (issue 29: a Database "payments" rewrote another team's Service
// "payments", and deleting the Database deleted it): one without
// dbkeeper's labels for it, one controlled by something else, one of an
// earlier Database of the same name, a Secret with the labels but not the
// owner reference, and, for an object without an owner reference (what a
// deletion policy may keep, such as the backup PVC), one without the
// labels. Each is left as it was, with a NotOursError naming it.
// An object that is the Database's (labels and its owner reference, or
// labels alone for what a deletion policy kept) is written, and so is one
// that does not exist.
func TestWriterApplyLeavesWhatIsNotOurs(t *testing.T) {
	ctx := context.Background()
	db := facettest.Database()
	ours := map[string]string{resources.LabelManagedBy: resources.ManagedBy, resources.LabelInstance: db.Name}
	ref := func(kind, name string, uid types.UID) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: dbv1.GroupVersion.String(), Kind: kind, Name: name, UID: uid, Controller: ptr.To(true)}
	}
	meta := func(name string, labels map[string]string, refs ...metav1.OwnerReference) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: db.Namespace, Name: name, Labels: labels, OwnerReferences: refs,
			Annotations: map[string]string{"team": "theirs"}}
	}
	c := facettest.Client(t, db,
		&corev1.ConfigMap{ObjectMeta: meta("foreign", nil)},
		&corev1.ConfigMap{ObjectMeta: meta("controlled", ours, ref("StatefulSet", "other", "sts-uid"))},
		&corev1.ConfigMap{ObjectMeta: meta("earlier", ours, ref("Database", db.Name, "an-earlier-uid"))},
		&corev1.ConfigMap{ObjectMeta: meta("kept", ours)},
		&corev1.ConfigMap{ObjectMeta: meta("owned", ours, ref("Database", db.Name, db.UID))},
		&corev1.Secret{ObjectMeta: meta("planted", ours)},
		&corev1.Secret{ObjectMeta: meta("made", ours, ref("Database", db.Name, db.UID))},
		&corev1.ConfigMap{ObjectMeta: meta("unowned-foreign", nil)},
		&corev1.ConfigMap{ObjectMeta: meta("unowned-kept", ours)},
	)
	w := WriterFor(c, events.NewFakeRecorder(10), "service")
	owner := metav1ac.OwnerReference().WithAPIVersion(dbv1.GroupVersion.String()).WithKind("Database").
		WithName(db.Name).WithUID(db.UID).WithController(true)
	configMap := func(name string) runtime.ApplyConfiguration {
		return corev1ac.ConfigMap(name, db.Namespace).WithLabels(ours).WithOwnerReferences(owner).WithData(map[string]string{"k": "v"})
	}
	secret := func(name string) runtime.ApplyConfiguration {
		return corev1ac.Secret(name, db.Namespace).WithLabels(ours).WithOwnerReferences(owner).WithStringData(map[string]string{"k": "v"})
	}
	// what a deletion policy may keep carries no owner reference, only
	// the labels (the backup PVC)
	unowned := func(name string) runtime.ApplyConfiguration {
		return corev1ac.ConfigMap(name, db.Namespace).WithLabels(ours).WithData(map[string]string{"k": "v"})
	}
	for _, tc := range []struct {
		name    string
		desired runtime.ApplyConfiguration
		obj     client.Object
		why     string // "" when it is written
	}{
		{"foreign", configMap("foreign"), &corev1.ConfigMap{}, "dbkeeper did not make it for this Database"},
		{"controlled", configMap("controlled"), &corev1.ConfigMap{}, "StatefulSet other controls it"},
		{"earlier", configMap("earlier"), &corev1.ConfigMap{}, "an earlier Database"},
		{"planted", secret("planted"), &corev1.Secret{}, "no owner reference"},
		{"kept", configMap("kept"), &corev1.ConfigMap{}, ""},
		{"owned", configMap("owned"), &corev1.ConfigMap{}, ""},
		{"made", secret("made"), &corev1.Secret{}, ""},
		{"new", configMap("new"), &corev1.ConfigMap{}, ""},
		{"unowned-foreign", unowned("unowned-foreign"), &corev1.ConfigMap{}, "dbkeeper did not make it for this Database"},
		{"unowned-kept", unowned("unowned-kept"), &corev1.ConfigMap{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.obj.DeepCopyObject().(client.Object)
			err := c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: tc.name}, before)
			require.True(t, err == nil || apierrors.IsNotFound(err), err)
			_, err = w.Apply(ctx, nil, tc.desired)
			after := tc.obj.DeepCopyObject().(client.Object)
			if tc.why == "" {
				require.NoError(t, err)
				require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: tc.name}, after))
				assert.NotEqual(t, before.GetResourceVersion(), after.GetResourceVersion(), "written")
				return
			}
			var taken *NotOursError
			require.ErrorAs(t, err, &taken)
			assert.Contains(t, err.Error(), tc.name)
			assert.Contains(t, taken.Why, tc.why)
			require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: tc.name}, after))
			assert.Equal(t, before.GetResourceVersion(), after.GetResourceVersion(), "left untouched")
			assert.Equal(t, before.GetOwnerReferences(), after.GetOwnerReferences())
		})
	}
}
