package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// dataPVC plays the StatefulSet controller: it creates the claim of the
// first replica as the StatefulSet would, from the claim template.
func dataPVC(t *testing.T, db *dbv1.Database) *corev1.PersistentVolumeClaim {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: db.Namespace,
			Name:      "data-" + resources.StatefulSetName(db) + "-0",
			Labels:    resources.Labels(db, resources.ComponentDatabase),
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			},
		},
	}
	require.NoError(t, admin.Create(context.Background(), pvc))
	return pvc
}

// gone reports whether the object no longer exists or is being deleted
// (envtest runs no controller that would remove the PVC protection
// finalizer, so a deleted PVC stays Terminating).
func gone(t require.TestingT, obj client.Object) bool {
	err := admin.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
	if apierrors.IsNotFound(err) {
		return true
	}
	require.NoError(t, err)
	return !obj.GetDeletionTimestamp().IsZero()
}

// released reports whether the Database is gone. It plays the garbage
// collector, which envtest does not run: a StatefulSet that cleanup deleted
// in the foreground keeps its foregroundDeletion finalizer until the
// collector has deleted its pods (envtest has none) and removes it.
func released(t require.TestingT, db *dbv1.Database) bool {
	ctx := context.Background()
	sts := &appsv1.StatefulSet{}
	err := admin.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: resources.StatefulSetName(db)}, sts)
	if err == nil && !sts.DeletionTimestamp.IsZero() && controllerutil.ContainsFinalizer(sts, metav1.FinalizerDeleteDependents) {
		patch := client.MergeFromWithOptions(sts.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.RemoveFinalizer(sts, metav1.FinalizerDeleteDependents)
		if err := admin.Patch(ctx, sts, patch); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			require.NoError(t, err)
		}
	}
	return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(db), &dbv1.Database{}))
}

// policyTable is the user guide's deletion table (docs/user-guide/deletion.md): what each policy keeps of the
// data PVCs, the generated Secret and the backup PVC.
var policyTable = []struct {
	policy                         dbv1.DeletionPolicy
	keepData, keepSecret, keepBack bool
}{
	{policy: dbv1.DeletionPolicyDelete, keepBack: true},
	{policy: dbv1.DeletionPolicyRetain, keepData: true, keepSecret: true, keepBack: true},
	{policy: dbv1.DeletionPolicyWipeOut},
}

// TestDeletionPolicies deletes a Database under each policy and checks what
// is deleted, what is kept, and that kept objects lose their owner
// reference to the Database so garbage collection cannot take them.
func TestDeletionPolicies(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, ns, "*")
	ctx := context.Background()
	for _, tc := range policyTable {
		t.Run(string(tc.policy), func(t *testing.T) {
			db := convergeReady(t, newDatabase(ns, "del-"+strings.ToLower(string(tc.policy)), func(db *dbv1.Database) {
				db.Spec.DeletionPolicy = tc.policy
			}))
			data := dataPVC(t, db)
			// A PVC dbkeeper never made, with the labels of a data PVC
			// (a copy through kubectl get -o yaml): no policy deletes it.
			copied := data.DeepCopy()
			copied.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: db.Name + "-copy", Labels: data.Labels}
			require.NoError(t, admin.Create(ctx, copied))
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: resources.GeneratedSecretName(db)}}
			// The superuser Secret follows the credentials Secret's row.
			superuser := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: resources.SuperuserSecretName(db)}}
			require.False(t, gone(t, superuser), "the secret controller made no superuser Secret")
			backup := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: resources.BackupName(db)}}

			// status.deletion announces what deletion will do.
			preview := getDatabase(t, db).Status.Deletion
			require.NotNil(t, preview, "no status.deletion")
			assert.Equal(t, tc.policy, preview.Policy)
			for what, keep := range map[string]bool{
				"PersistentVolumeClaim/" + data.Name:   tc.keepData,
				"Secret/" + secret.Name:                tc.keepSecret,
				"Secret/" + superuser.Name:             tc.keepSecret,
				"PersistentVolumeClaim/" + backup.Name: tc.keepBack,
			} {
				list := preview.Deletes
				if keep {
					list = preview.Keeps
				}
				assert.Contains(t, list, what, "status.deletion of policy %s", tc.policy)
			}
			assert.NotContains(t, append(preview.Deletes, preview.Keeps...), "PersistentVolumeClaim/"+copied.Name,
				"status.deletion lists a PVC dbkeeper did not make")

			require.NoError(t, admin.Delete(ctx, db))
			require.Eventually(t, func() bool { return released(t, db) }, timeout, tick, "the Database was not released")

			for _, c := range []struct {
				obj  client.Object
				keep bool
			}{{data, tc.keepData}, {secret, tc.keepSecret}, {superuser, tc.keepSecret}, {backup, tc.keepBack}, {copied, true}} {
				if !c.keep {
					assert.True(t, gone(t, c.obj), "%T %s kept, policy %s deletes it", c.obj, c.obj.GetName(), tc.policy)
					continue
				}
				require.False(t, gone(t, c.obj), "%T %s deleted, policy %s keeps it", c.obj, c.obj.GetName(), tc.policy)
				for _, ref := range c.obj.GetOwnerReferences() {
					assert.NotEqual(t, db.UID, ref.UID, "%T %s kept with an owner reference to the Database", c.obj, c.obj.GetName())
				}
			}
		})
	}
}

// TestDoNotDeleteHoldsTheDatabase checks a DoNotDelete Database stays, says
// why, and goes once the policy is changed.
func TestDoNotDeleteHoldsTheDatabase(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, ns, "*")
	ctx := context.Background()
	db := convergeReady(t, newDatabase(ns, "precious", func(db *dbv1.Database) {
		db.Spec.DeletionPolicy = dbv1.DeletionPolicyDoNotDelete
	}))
	data := dataPVC(t, db)

	preview := getDatabase(t, db).Status.Deletion
	require.NotNil(t, preview)
	assert.True(t, preview.Blocked)
	assert.Empty(t, preview.Deletes)

	require.NoError(t, admin.Delete(ctx, db))
	cond := waitCondition(t, db, dbv1.ConditionDeleting, metav1.ConditionFalse, dbv1.ReasonDeletionBlocked)
	assert.Contains(t, cond.Message, "DoNotDelete")
	waitCondition(t, db, dbv1.ConditionReady, metav1.ConditionFalse, dbv1.ReasonDeleting)
	assert.Equal(t, dbv1.PhaseDeleting, getDatabase(t, db).Status.Phase)
	assert.Never(t, func() bool { return gone(t, data) }, quiet, tick, "data deleted while DoNotDelete holds it")

	patchDatabase(t, db, func(d *dbv1.Database) { d.Spec.DeletionPolicy = dbv1.DeletionPolicyDelete })
	require.Eventually(t, func() bool { return released(t, db) }, timeout, tick, "the Database was not released after the policy changed")
	assert.True(t, gone(t, data), "data kept after the policy changed to Delete")
}
