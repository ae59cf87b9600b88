package realnode

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// deleteAndWait deletes a Database and waits until it is gone, its
// deletion policy carried out.
func deleteAndWait(t *testing.T, db *dbv1.Database) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, k8s.Delete(ctx, db))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(db), &dbv1.Database{}))
	}, timeout, 200*time.Millisecond, "Database %s deleted", db.Name)
	require.Eventually(t, func() bool { return len(podsOf(t, db)) == 0 }, timeout, 200*time.Millisecond, "its pods gone")
}

// dataClaims lists the data PVCs of a Database.
func dataClaims(t *testing.T, db *dbv1.Database) []string {
	t.Helper()
	pvcs := &corev1.PersistentVolumeClaimList{}
	require.NoError(t, k8s.List(context.Background(), pvcs, client.InNamespace(db.Namespace)))
	var names []string
	for _, p := range pvcs.Items {
		if resources.IsDataPVCName(db, p.Name) {
			names = append(names, p.Name)
		}
	}
	return names
}

// TestRetainKeepsRowsAndPassword: a Database deleted under Retain and
// created again with the same name serves the same rows with the same
// password.
func TestRetainKeepsRowsAndPassword(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startOperator(t, ns)
	spec := func() *dbv1.Database {
		return newDatabase(ns, "kept", "17", func(d *dbv1.Database) { d.Spec.DeletionPolicy = dbv1.DeletionPolicyRetain })
	}
	db := spec()
	create(t, db)
	waitReady(t, db)
	fillItems(t, generated(db))
	password := secretValue(t, ns, resources.GeneratedSecretName(db), "password")

	deleteAndWait(t, db)
	assert.NotEmpty(t, dataClaims(t, db), "Retain keeps the data volume")

	again := spec()
	create(t, again)
	waitReady(t, again)
	assert.Equal(t, password, secretValue(t, ns, resources.GeneratedSecretName(again), "password"), "same password")
	assert.Equal(t, rows, countItems(t, generated(again)), "same rows")
}

// TestDeleteKeepsARestorableDump: under Delete the data volume goes, the
// backup volume stays, and its dump restores the rows into a new Database.
func TestDeleteKeepsARestorableDump(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startOperator(t, ns)
	db := newDatabase(ns, "dropped", "15", func(d *dbv1.Database) { d.Spec.DeletionPolicy = dbv1.DeletionPolicyDelete })
	create(t, db)
	waitReady(t, db)
	fillItems(t, generated(db))
	done, failed := backupNow(t, db, "before-delete")
	require.False(t, failed, "backup failed: %s", done.Status.Backup.LastFailureMessage)

	deleteAndWait(t, db)
	require.Eventually(t, func() bool { return len(dataClaims(t, db)) == 0 }, timeout, 200*time.Millisecond, "Delete removes the data volume")
	backup := &corev1.PersistentVolumeClaim{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: resources.BackupName(db)}, backup), "Delete keeps the backup volume")

	revived := newDatabase(ns, "revived", "15", func(d *dbv1.Database) {
		d.Spec.Bootstrap = &dbv1.BootstrapSpec{FromBackup: &dbv1.BootstrapFromBackup{Database: db.Name}}
	})
	create(t, revived)
	waitReady(t, revived)
	assert.Equal(t, rows, countItems(t, generated(revived)), "the kept dump restores the rows")
}
