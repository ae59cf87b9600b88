package integration

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestUpgradeDisownsSecretAndBackupPVC: a generated Secret and a backup PVC
// made by an earlier version carry an owner reference to the Database,
// with which garbage collection could take them before the cleanup
// finalizer runs. The operator takes it off, keeping the objects (same UID,
// same password). It also pins down why that takes a patch: the Secret was
// created with Create and its metadata then applied, so an apply that
// leaves the reference out does not remove it.
func TestUpgradeDisownsSecretAndBackupPVC(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	db := createDatabase(t, newDatabase(ns, "legacy"))
	ref := metav1ac.OwnerReference().WithAPIVersion(dbv1.GroupVersion.String()).WithKind("Database").
		WithName(db.Name).WithUID(db.UID).WithController(true).WithBlockOwnerDeletion(true)
	labels := func(component string) map[string]string { return resources.Labels(db, component) }

	// What the earlier secret controller did: Create with the reference,
	// then apply the labels and the reference.
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: resources.GeneratedSecretName(db), Labels: labels(resources.ComponentCredentials),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: dbv1.GroupVersion.String(), Kind: "Database", Name: db.Name, UID: db.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Data: map[string][]byte{"username": []byte("app"), "password": []byte("the-old-password")},
	}
	require.NoError(t, admin.Create(ctx, secret, client.FieldOwner("dbkeeper-secret")))
	applySecret := func(withRef bool) {
		ac := corev1ac.Secret(secret.Name, ns).WithLabels(labels(resources.ComponentCredentials))
		if withRef {
			ac.WithOwnerReferences(ref)
		}
		require.NoError(t, admin.Apply(ctx, ac, client.FieldOwner("dbkeeper-secret"), client.ForceOwnership))
	}
	applySecret(true)
	// Leaving the reference out of the apply does not remove it: the
	// Create's managed fields still hold it.
	applySecret(false)
	require.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(secret), secret))
	require.Len(t, secret.OwnerReferences, 1, "an apply without the owner reference removed it; Disown's patch is not needed")

	// What the earlier backup controller did: apply the PVC with the reference.
	legacy := resources.BackupPVC(db)
	legacy.OwnerReferences = nil
	require.NoError(t, admin.Apply(ctx, legacy.WithOwnerReferences(ref), client.FieldOwner("dbkeeper-backup"), client.ForceOwnership))
	backup := &corev1.PersistentVolumeClaim{}
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.BackupName(db)}, backup))
	require.Len(t, backup.OwnerReferences, 1)

	startOperator(t, ns, "*")
	markStatefulSetReady(t, db)
	waitCondition(t, db, dbv1.ConditionReady, metav1.ConditionTrue, dbv1.ReasonReady)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, obj := range []client.Object{&corev1.Secret{}, &corev1.PersistentVolumeClaim{}} {
			name := secret.Name
			if _, ok := obj.(*corev1.PersistentVolumeClaim); ok {
				name = backup.Name
			}
			if assert.NoError(c, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)) {
				assert.Empty(c, obj.GetOwnerReferences(), "%T %s still has an owner reference", obj, name)
			}
		}
	}, timeout, tick)
	kept := &corev1.Secret{}
	require.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(secret), kept))
	assert.Equal(t, secret.UID, kept.UID)
	assert.Equal(t, "the-old-password", string(kept.Data["password"]))
	keptBackup := &corev1.PersistentVolumeClaim{}
	require.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(backup), keptBackup))
	assert.Equal(t, backup.UID, keptBackup.UID)
}
