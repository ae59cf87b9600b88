package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/cluster"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
)

// lastBackupGauge reads dbkeeper_database_last_successful_backup_timestamp_seconds
// for the Database from the operator's metrics registry.
func lastBackupGauge(t require.TestingT, db *dbv1.Database) (float64, bool) {
	families, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "dbkeeper_database_last_successful_backup_timestamp_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] == db.Namespace && labels["name"] == db.Name {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// TestOnDemandBackup: each new value of the backup-now annotation runs one
// Job, whose success lands in status and in the gauge.
func TestOnDemandBackup(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, ns)
	ctx := context.Background()
	db := newDatabase(ns, "adhoc", func(d *dbv1.Database) { d.Spec.Backup.Schedule = "0 0 1 1 *" })
	require.NoError(t, k8s.Create(ctx, db))
	waitReady(t, db)
	_, found := lastBackupGauge(t, db)
	assert.False(t, found, "a gauge for a Database that never backed up")

	annotateNow := func(token string) {
		patchDatabase(t, db, func(d *dbv1.Database) {
			if d.Annotations == nil {
				d.Annotations = map[string]string{}
			}
			d.Annotations[dbv1.AnnotationBackupNow] = token
		})
	}
	annotateNow("first")
	jobName := resources.OnDemandBackupJobName(db, "first")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		live := getDatabase(c, db)
		if assert.NotNil(c, live.Status.Backup) {
			assert.Equal(c, "first", live.Status.Backup.LastOnDemandToken)
			assert.Equal(c, jobName, live.Status.Backup.LastJob)
			assert.NotNil(c, live.Status.Backup.LastSuccessfulTime, "the on-demand Job has not succeeded yet")
		}
	}, timeout, tick)
	success := getDatabase(t, db).Status.Backup.LastSuccessfulTime
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		v, ok := lastBackupGauge(c, db)
		assert.True(c, ok, "no gauge for the Database")
		assert.Equal(c, float64(success.Unix()), v)
	}, timeout, tick)

	// The same token never runs twice, even when its Job is gone.
	require.NoError(t, k8s.Delete(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: jobName}},
		client.PropagationPolicy(metav1.DeletePropagationBackground)))
	patchDatabase(t, db, func(d *dbv1.Database) { d.Annotations["example.com/poke"] = "1" })
	assert.Never(t, func() bool {
		return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: jobName}, &batchv1.Job{}) == nil
	}, 3*time.Second, tick, "the token ran a second Job")

	annotateNow("second")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		live := getDatabase(c, db)
		assert.Equal(c, resources.OnDemandBackupJobName(db, "second"), live.Status.Backup.LastJob)
		assert.Equal(c, "second", live.Status.Backup.LastOnDemandToken)
	}, timeout, tick)
}

// TestBackupStale: no successful backup within maxAge of creation makes
// BackupReady False/BackupStale without any event but time passing.
func TestBackupStale(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, ns)
	db := newDatabase(ns, "stale", func(d *dbv1.Database) {
		d.Spec.Backup.Schedule = "0 0 1 1 *"
		d.Spec.Backup.MaxAge = &metav1.Duration{Duration: 5 * time.Second}
	})
	require.NoError(t, k8s.Create(context.Background(), db))
	waitCondition(t, db, dbv1.ConditionBackupReady, metav1.ConditionTrue, dbv1.ReasonBackupScheduled)
	cond := waitCondition(t, db, dbv1.ConditionBackupReady, metav1.ConditionFalse, dbv1.ReasonBackupStale)
	assert.Contains(t, cond.Message, "no backup has succeeded since the Database was created")
	waitCondition(t, db, dbv1.ConditionReady, metav1.ConditionFalse, dbv1.ReasonBackupStale)
}

// TestRetainThenAdopt: a Retained Database leaves its data, Secret and
// backup volume without owner references; a new Database of the same name
// adopts them (by name: they stay without owner references), with the same
// password and the same volume.
func TestRetainThenAdopt(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, ns)
	ctx := context.Background()
	db := newDatabase(ns, "keep", func(d *dbv1.Database) { d.Spec.DeletionPolicy = dbv1.DeletionPolicyRetain })
	require.NoError(t, k8s.Create(ctx, db))
	waitReady(t, db)
	pass := password(t, ns, "keep-credentials")
	data := &corev1.PersistentVolumeClaim{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "data-keep-0"}, data))

	require.NoError(t, k8s.Delete(ctx, db))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(db), &dbv1.Database{})), "Database still there")
		assert.True(c, apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "keep"}, &appsv1.StatefulSet{})), "StatefulSet not collected")
	}, timeout, tick)
	for _, obj := range []client.Object{
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data-keep-0"}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "keep-backup"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "keep-credentials"}},
	} {
		require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj), "Retain lost %T %s", obj, obj.GetName())
		assert.Empty(t, obj.GetOwnerReferences(), "%T %s kept with owner references", obj, obj.GetName())
		assert.True(t, obj.GetDeletionTimestamp().IsZero(), "%T %s is being deleted", obj, obj.GetName())
	}

	again := newDatabase(ns, "keep")
	require.NoError(t, k8s.Create(ctx, again))
	live := waitReady(t, again)
	assert.Equal(t, pass, password(t, ns, "keep-credentials"), "the adopted Secret's password changed")
	adopted := &corev1.PersistentVolumeClaim{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "data-keep-0"}, adopted))
	assert.Equal(t, data.UID, adopted.UID, "the new Database got a new data volume")
	assert.Equal(t, data.Spec.VolumeName, adopted.Spec.VolumeName)
	sec := &corev1.Secret{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "keep-credentials"}, sec))
	assert.Equal(t, live.Status.CredentialsSecret, sec.Name, "the Secret was not adopted")
	assert.Empty(t, sec.OwnerReferences, "the adopted Secret got an owner reference")
	dbtest.AssertOneOfEach(t, k8s, live)
}

// TestWipeOutAndDeletionWhileDown: a Database deleted while the operator
// is down is cleaned up when it comes back; WipeOut removes the backups too.
func TestWipeOutAndDeletionWhileDown(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t, ns)
	ctx := context.Background()
	db := newDatabase(ns, "wipe", func(d *dbv1.Database) { d.Spec.DeletionPolicy = dbv1.DeletionPolicyWipeOut })
	require.NoError(t, k8s.Create(ctx, db))
	waitReady(t, db)
	op.Stop()

	require.NoError(t, k8s.Delete(ctx, db))
	assert.Never(t, func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(db), &dbv1.Database{}))
	},
		2*time.Second, tick, "the Database went without its finalizer being handled")

	startOperator(t, ns)
	gone := []client.Object{
		db,
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data-wipe-0"}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wipe-backup"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wipe-credentials"}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wipe"}},
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, obj := range gone {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)
			assert.True(c, apierrors.IsNotFound(err), "%T %s still there", obj, obj.GetName())
		}
	}, timeout, tick)
}

// TestFinalBackupBeforeDelete: with spec.backup.beforeDelete a failed final
// backup holds the deletion (Deleting=False, an Event); once it succeeds the
// Database goes and the backup volume stays.
func TestFinalBackupBeforeDelete(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, ns)
	ctx := context.Background()
	db := newDatabase(ns, "last", func(d *dbv1.Database) {
		d.Spec.Backup.Schedule = "0 0 1 1 *"
		d.Spec.Backup.BeforeDelete = true
	})
	require.NoError(t, k8s.Create(ctx, db))
	waitReady(t, db)

	// A final backup Job that fails: made here from the CronJob's template
	// with the label that makes kwok fail its pod.
	cron := &batchv1.CronJob{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "last-backup"}, cron))
	failing := jobFromCronJob(cron, resources.FinalBackupJobName(db))
	failing.Spec.Template.Labels[cluster.OutcomeLabel] = cluster.OutcomeFail
	require.NoError(t, k8s.Create(ctx, failing))

	require.NoError(t, k8s.Delete(ctx, db))
	cond := waitCondition(t, db, dbv1.ConditionDeleting, metav1.ConditionFalse, dbv1.ReasonFinalBackupFailed)
	assert.Contains(t, cond.Message, "last-final-backup")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		events := &eventsv1.EventList{}
		require.NoError(c, k8s.List(ctx, events, client.InNamespace(ns)))
		found := false
		for _, e := range events.Items {
			found = found || (e.Regarding.Name == "last" && e.Reason == dbv1.ReasonFinalBackupFailed && e.Type == corev1.EventTypeWarning)
		}
		assert.True(c, found, "no Warning Event FinalBackupFailed")
	}, timeout, tick)
	assert.Never(t, func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(db), &dbv1.Database{}))
	},
		2*time.Second, tick, "deleted although the final backup failed")

	// Deleting the failed Job retries: dbkeeper's own final backup succeeds.
	require.NoError(t, k8s.Delete(ctx, failing, client.PropagationPolicy(metav1.DeletePropagationBackground)))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(db), &dbv1.Database{}))
	},
		timeout, tick, "the Database was not deleted after the final backup succeeded")
	backup := &corev1.PersistentVolumeClaim{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "last-backup"}, backup), "the backup volume went")
	assert.Empty(t, backup.OwnerReferences)
}

// TestBootstrapFromBackup: a Database with spec.bootstrap is not Ready until
// its restore Job succeeded, which it runs once; a failed restore says so.
func TestBootstrapFromBackup(t *testing.T) {
	ns, history := withSource(t)
	ctx := context.Background()
	restored := history("copy")
	require.NoError(t, k8s.Create(ctx, restored))
	live := waitReady(t, restored)
	require.NotNil(t, live.Status.Backup)
	assert.Equal(t, "src/latest", live.Status.Backup.RestoredFrom)
	job := &batchv1.Job{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "copy-restore"}, job))
	assert.Equal(t, "src-backup", job.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName)
	require.NotNil(t, job.Status.CompletionTime, "restore Job not complete")
	ready := meta.FindStatusCondition(live.Status.Conditions, dbv1.ConditionReady)
	assert.False(t, ready.LastTransitionTime.Before(&metav1.Time{Time: job.Status.CompletionTime.Truncate(time.Second)}),
		"Ready became True at %s, before the restore finished at %s", ready.LastTransitionTime, job.Status.CompletionTime)

	// Once restored, never again: the Job may go.
	require.NoError(t, k8s.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)))
	patchDatabase(t, restored, func(d *dbv1.Database) { d.Spec.Backup.Retention = 3 })
	waitReady(t, restored)
	assert.Never(t, func() bool {
		return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "copy-restore"}, &batchv1.Job{}) == nil
	},
		2*time.Second, tick, "the restore ran again")

	// A restore that fails holds Ready with the reason.
	cron := &batchv1.CronJob{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "src-backup"}, cron))
	failing := jobFromCronJob(cron, "broken-restore")
	failing.Labels[resources.LabelInstance] = "broken"
	failing.Spec.Template.Labels[cluster.OutcomeLabel] = cluster.OutcomeFail
	require.NoError(t, k8s.Create(ctx, failing))
	broken := history("broken")
	require.NoError(t, k8s.Create(ctx, broken))
	cond := waitCondition(t, broken, dbv1.ConditionBackupReady, metav1.ConditionFalse, dbv1.ReasonRestoreFailed)
	assert.Contains(t, cond.Message, "broken-restore")
	waitCondition(t, broken, dbv1.ConditionReady, metav1.ConditionFalse, dbv1.ReasonRestoreFailed)
}

// TestDoNotDelete: the policy holds a deleted Database and all its objects
// until the policy changes.
func TestDoNotDelete(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, ns)
	ctx := context.Background()
	db := newDatabase(ns, "vault", func(d *dbv1.Database) { d.Spec.DeletionPolicy = dbv1.DeletionPolicyDoNotDelete })
	require.NoError(t, k8s.Create(ctx, db))
	waitReady(t, db)

	require.NoError(t, k8s.Delete(ctx, db))
	cond := waitCondition(t, db, dbv1.ConditionDeleting, metav1.ConditionFalse, dbv1.ReasonDeletionBlocked)
	assert.Contains(t, cond.Message, "DoNotDelete")
	held := []client.Object{
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vault"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vault-0"}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data-vault-0"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vault-credentials"}},
	}
	assert.Never(t, func() bool {
		for _, want := range held {
			// A fresh object per look: testify runs each look in its own
			// goroutine, and the last may outlive Never.
			obj := want.DeepCopyObject().(client.Object)
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil || !obj.GetDeletionTimestamp().IsZero() {
				return true
			}
		}
		return false
	}, 3*time.Second, tick, "an object of a DoNotDelete Database went")

	patchDatabase(t, db, func(d *dbv1.Database) { d.Spec.DeletionPolicy = dbv1.DeletionPolicyDelete })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, want := range append(held, db) {
			obj := want.DeepCopyObject().(client.Object)
			err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)
			assert.True(c, apierrors.IsNotFound(err), "%T %s still there", obj, obj.GetName())
		}
	}, timeout, tick)
}
