package cleanup

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestCarryOutTouchesOnlyItsOwn: under WipeOut, cleanup deletes the
// Database's own children and nothing that merely carries its labels, nor a
// StatefulSet of its name that another Database owns; under Retain it takes
// an earlier version's owner reference off what it keeps.
func TestCarryOutTouchesOnlyItsOwn(t *testing.T) {
	db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop", UID: "db-uid"},
		Spec: dbv1.DatabaseSpec{Engine: dbv1.EnginePostgres}}
	ref := metav1.OwnerReference{APIVersion: dbv1.GroupVersion.String(), Kind: "Database", Name: "orders", UID: db.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	foreign := ref
	foreign.UID = "another-db-uid"
	meta := func(name, component string, refs ...metav1.OwnerReference) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: resources.Labels(db, component), OwnerReferences: refs}
	}
	pvc := func(m metav1.ObjectMeta) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: m}
	}
	objects := func() []client.Object {
		return []client.Object{
			pvc(meta("data-orders-0", resources.ComponentDatabase)),
			pvc(meta("data-orders-1", resources.ComponentDatabase)),
			pvc(meta("orders-copy", resources.ComponentDatabase)),        // a copy of the labels
			pvc(meta("data-orders-0-copy", resources.ComponentDatabase)), // not an ordinal
			pvc(meta("orders-backup", resources.ComponentBackup, ref)),   // an earlier version's owner reference
			&corev1.Secret{ObjectMeta: meta("orders-credentials", resources.ComponentCredentials, ref)},
			&corev1.Secret{ObjectMeta: meta("orders-superuser", resources.ComponentSuperuser)},
			// orphaned by orphan deletion: no owner reference left
			&policyv1.PodDisruptionBudget{ObjectMeta: meta("orders", resources.ComponentDatabase)},
			&policyv1.PodDisruptionBudget{ObjectMeta: meta("orders-primary", resources.ComponentDatabase)},
			&coordinationv1.Lease{ObjectMeta: meta("orders-primary", resources.ComponentDatabase)},
			&rbacv1.Role{ObjectMeta: meta("orders-instance", resources.ComponentDatabase)},
			&rbacv1.RoleBinding{ObjectMeta: meta("orders-instance", resources.ComponentDatabase)},
			&corev1.ServiceAccount{ObjectMeta: meta("orders-instance", resources.ComponentDatabase)},
			&appsv1.StatefulSet{ObjectMeta: meta("orders", resources.ComponentDatabase, foreign)},
		}
	}
	exists := func(c client.Client, obj client.Object) bool {
		err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return false
		}
		require.NoError(t, err)
		return true
	}

	t.Run("WipeOut", func(t *testing.T) {
		c := facettest.Client(t, objects()...)
		r := newReconciler(c, facet.WriterFor(c, &events.FakeRecorder{}, Name).WhileDeleting())
		waiting, err := r.carryOut(context.Background(), db, planFor(dbv1.DeletionPolicyWipeOut))
		require.NoError(t, err)
		assert.Empty(t, waiting, "waits for a StatefulSet that is not this Database's")
		for name, want := range map[string]bool{
			"data-orders-0": false, "data-orders-1": false, "orders-backup": false,
			"orders-copy": true, "data-orders-0-copy": true,
		} {
			assert.Equal(t, want, exists(c, pvc(metav1.ObjectMeta{Namespace: "shop", Name: name})), "PVC %s exists", name)
		}
		assert.False(t, exists(c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-credentials"}}))
		assert.False(t, exists(c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-superuser"}}),
			"the superuser Secret outlived a policy that deletes the credentials Secret")
		assert.True(t, exists(c, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}}),
			"deleted a StatefulSet another Database owns")
		assert.False(t, exists(c, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}}),
			"an orphaned disruption budget outlived the Database whose data went")
		for _, obj := range []client.Object{
			&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-primary"}},
			&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-primary"}},
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-instance"}},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-instance"}},
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-instance"}},
		} {
			assert.False(t, exists(c, obj), "an orphaned %T outlived the Database whose data went", obj)
		}
	})

	t.Run("Retain", func(t *testing.T) {
		c := facettest.Client(t, objects()...)
		r := newReconciler(c, facet.WriterFor(c, &events.FakeRecorder{}, Name).WhileDeleting())
		waiting, err := r.carryOut(context.Background(), db, planFor(dbv1.DeletionPolicyRetain))
		require.NoError(t, err)
		assert.Empty(t, waiting)
		for _, obj := range []client.Object{
			pvc(metav1.ObjectMeta{Namespace: "shop", Name: "data-orders-0"}),
			pvc(metav1.ObjectMeta{Namespace: "shop", Name: "orders-backup"}),
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-credentials"}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-superuser"}},
		} {
			if assert.True(t, exists(c, obj), "%T %s deleted", obj, obj.GetName()) {
				assert.Empty(t, obj.GetOwnerReferences(), "%T %s kept with an owner reference", obj, obj.GetName())
			}
		}
	})

	t.Run("Delete waits for its StatefulSet", func(t *testing.T) {
		objs := objects()
		objs[len(objs)-1] = &appsv1.StatefulSet{ObjectMeta: meta("orders", resources.ComponentDatabase)} // orphaned
		c := facettest.Client(t, objs...)
		r := newReconciler(c, facet.WriterFor(c, &events.FakeRecorder{}, Name).WhileDeleting())
		waiting, err := r.carryOut(context.Background(), db, planFor(dbv1.DeletionPolicyDelete))
		require.NoError(t, err)
		assert.Contains(t, waiting, "StatefulSet orders")
		assert.True(t, exists(c, pvc(metav1.ObjectMeta{Namespace: "shop", Name: "data-orders-0"})),
			"deleted a data PVC while the StatefulSet was there")
	})
}

// TestPlanFor: what each deletion policy deletes and keeps.
func TestPlanFor(t *testing.T) {
	for policy, want := range map[dbv1.DeletionPolicy]string{
		dbv1.DeletionPolicyDelete:  "delete the data PVCs, delete the generated credentials and superuser Secrets, keep the backup PVC",
		dbv1.DeletionPolicyRetain:  "keep the data PVCs, keep the generated credentials and superuser Secrets, keep the backup PVC",
		dbv1.DeletionPolicyWipeOut: "delete the data PVCs, delete the generated credentials and superuser Secrets, delete the backup PVC",
	} {
		assert.Equal(t, want, planFor(policy).String(), "policy %s", policy)
	}
}

// TestReconcile: a live Database gets the finalizer and status.deletion,
// the preview of its policy; a deleted one under DoNotDelete keeps its
// finalizer and reports DeletionBlocked; under Retain, with nothing left to
// wait for, the finalizer goes.
func TestReconcile(t *testing.T) {
	ctx := context.Background()
	// reconcile runs the reconciler for a Database of the policy, new (no
	// finalizer yet) or deleted, and returns it as it is left, or nil.
	reconcile := func(t *testing.T, policy dbv1.DeletionPolicy, deleted bool) *dbv1.Database {
		t.Helper()
		db := facettest.Database()
		db.Spec.DeletionPolicy = policy
		if deleted {
			db.DeletionTimestamp = ptr.To(metav1.Now())
		} else {
			db.Finalizers = nil
		}
		c := facettest.Client(t, db)
		r := newReconciler(c, facet.WriterFor(c, &events.FakeRecorder{}, Name).WhileDeleting())
		req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)}
		_, err := r.Reconcile(ctx, req)
		if apierrors.IsConflict(err) {
			// The pass wrote Deleting, which moved the resourceVersion
			// under its finalizer patch; the next pass writes nothing
			// and patches.
			_, err = r.Reconcile(ctx, req)
		}
		require.NoError(t, err)
		got := &dbv1.Database{}
		err = c.Get(ctx, client.ObjectKeyFromObject(db), got)
		if apierrors.IsNotFound(err) {
			return nil
		}
		require.NoError(t, err)
		return got
	}

	t.Run("live: finalizer and preview", func(t *testing.T) {
		got := reconcile(t, dbv1.DeletionPolicyWipeOut, false)
		assert.Contains(t, got.Finalizers, dbv1.Finalizer)
		require.NotNil(t, got.Status.Deletion)
		assert.Equal(t, []string{"PersistentVolumeClaim/data-orders-0", "Secret/orders-credentials", "Secret/orders-superuser", "PersistentVolumeClaim/orders-backup"},
			got.Status.Deletion.Deletes)
		assert.Empty(t, got.Status.Deletion.Keeps)
	})

	t.Run("deleted under DoNotDelete: blocked", func(t *testing.T) {
		got := reconcile(t, dbv1.DeletionPolicyDoNotDelete, true)
		require.NotNil(t, got, "the Database went")
		assert.Contains(t, got.Finalizers, dbv1.Finalizer)
		deleting := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionDeleting)
		require.NotNil(t, deleting)
		assert.Equal(t, dbv1.ReasonDeletionBlocked, deleting.Reason)
		assert.True(t, got.Status.Deletion.Blocked)
	})

	t.Run("deleted under Retain: released", func(t *testing.T) {
		got := reconcile(t, dbv1.DeletionPolicyRetain, true)
		assert.Nil(t, got, "the finalizer was not removed")
	})
}
