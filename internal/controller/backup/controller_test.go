package backup

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// TestSync: a sync creates the backup PVC and the CronJob and reports
// BackupReady from the history at the syncer's clock; the backup-now
// annotation starts one Job per token, recorded in status.backup.
func TestSync(t *testing.T) {
	ctx := context.Background()
	db := facettest.Database()
	db.CreationTimestamp = metav1.NewTime(t0)
	db.Spec.Backup.Schedule = "0 2 * * *"
	c := facettest.Client(t, db)
	now := t0.Add(time.Hour)
	s := newSyncer(c, facet.WriterFor(c, &events.FakeRecorder{}, Name), func() time.Time { return now })
	key := func(name string) client.ObjectKey { return client.ObjectKey{Namespace: db.Namespace, Name: name} }

	out, err := s.Sync(ctx, db)
	require.NoError(t, err)
	require.NoError(t, c.Get(ctx, key(resources.BackupName(db)), &corev1.PersistentVolumeClaim{}), "backup PVC")
	require.NoError(t, c.Get(ctx, key(resources.BackupName(db)), &batchv1.CronJob{}), "backup CronJob")
	assert.Equal(t, metav1.ConditionTrue, out.Condition.Status, out.Condition.Message)
	assert.Equal(t, dbv1.ReasonBackupScheduled, out.Condition.Reason)
	assert.Equal(t, db.Spec.BackupMaxAge()-time.Hour+time.Second, out.RequeueAfter, "looks again when the backups would be stale")

	db.Annotations = map[string]string{dbv1.AnnotationBackupNow: "t1"}
	out, err = s.Sync(ctx, db)
	require.NoError(t, err)
	jobs := &batchv1.JobList{}
	require.NoError(t, c.List(ctx, jobs, client.InNamespace(db.Namespace)))
	require.Len(t, jobs.Items, 1)
	assert.Equal(t, resources.OnDemandBackupJobName(db, "t1"), jobs.Items[0].Name)
	require.NotNil(t, out.Status.Backup)
	assert.Equal(t, "t1", *out.Status.Backup.LastOnDemandToken)

	// The token recorded, a sync starts no second Job.
	db.Status.Backup = &dbv1.BackupStatus{LastOnDemandToken: "t1"}
	_, err = s.Sync(ctx, db)
	require.NoError(t, err)
	require.NoError(t, c.List(ctx, jobs, client.InNamespace(db.Namespace)))
	assert.Len(t, jobs.Items, 1)
}

// TestSyncRefusesAnUnconsentedRecovery: a recovery from a Database of
// another namespace that does not list this one is BackupReady=False
// RecoveryRefused, naming the annotation; once the source allows it, the
// recovery goes on (Recovering).
func TestSyncRefusesAnUnconsentedRecovery(t *testing.T) {
	ctx := context.Background()
	source := facettest.Database()
	source.Namespace, source.Name, source.UID = "prod", "ledger", "source-uid"
	source.Spec.Backup.ObjectStore = &dbv1.ObjectStoreSpec{Endpoint: "s3.example", Bucket: "b", Path: "/dbkeeper", CredentialsSecret: "s3"}
	db := facettest.Database()
	db.Spec.Backup.ObjectStore = source.Spec.Backup.ObjectStore
	db.Spec.Bootstrap = &dbv1.BootstrapSpec{Recovery: &dbv1.BootstrapRecovery{Database: "ledger", Namespace: "prod"}}
	c := facettest.Client(t, db, source)
	s := newSyncer(c, facet.WriterFor(c, &events.FakeRecorder{}, Name), func() time.Time { return t0 })

	out, err := s.Sync(ctx, db)
	require.NoError(t, err)
	assert.Equal(t, dbv1.ReasonRecoveryRefused, out.Condition.Reason, out.Condition.Message)
	assert.Contains(t, out.Condition.Message, dbv1.AnnotationRestoreAllowedNamespaces)
	assert.Contains(t, out.Condition.Message, "prod/ledger")
	assert.Positive(t, out.RequeueAfter, "looked at again: a consent may come")

	source.Annotations = map[string]string{dbv1.AnnotationRestoreAllowedNamespaces: "other, " + db.Namespace}
	require.NoError(t, c.Update(ctx, source))
	out, err = s.Sync(ctx, db)
	require.NoError(t, err)
	assert.Equal(t, dbv1.ReasonRecovering, out.Condition.Reason, out.Condition.Message)
}

// TestSyncKeepsTheVolumeRepository: with spec.backup.volumeRepository
// Enabled a sync makes the repository's credentials (once: a second sync
// keeps them), Service and S3 server; BackupReady waits for the archive.
// Turned off, the server goes and the credentials stay with the data.
func TestSyncKeepsTheVolumeRepository(t *testing.T) {
	ctx := context.Background()
	db := facettest.Database()
	db.Spec.Backup.VolumeRepository = dbv1.VolumeRepositoryEnabled
	c := facettest.Client(t, db)
	s := newSyncer(c, facet.WriterFor(c, &events.FakeRecorder{}, Name), func() time.Time { return t0 })
	key := client.ObjectKey{Namespace: db.Namespace, Name: resources.VolumeRepositoryName(db)}

	out, err := s.Sync(ctx, db)
	require.NoError(t, err)
	assert.Equal(t, dbv1.ReasonArchiveStarting, out.Condition.Reason, out.Condition.Message)
	assert.Equal(t, resources.RepositoryPath(db, resources.VolumeStore(db)), *out.Status.Backup.RepositoryPath)
	secret := &corev1.Secret{}
	require.NoError(t, c.Get(ctx, key, secret))
	require.NoError(t, c.Get(ctx, key, &corev1.Service{}))
	require.NoError(t, c.Get(ctx, key, &appsv1.StatefulSet{}))
	_, err = s.Sync(ctx, db)
	require.NoError(t, err)
	again := &corev1.Secret{}
	require.NoError(t, c.Get(ctx, key, again))
	assert.Equal(t, secret.Data, again.Data, "the credentials never change")

	db.Spec.Backup.VolumeRepository = dbv1.VolumeRepositoryDisabled
	out, err = s.Sync(ctx, db)
	require.NoError(t, err)
	assert.True(t, apierrors.IsNotFound(c.Get(ctx, key, &appsv1.StatefulSet{})), "the server goes")
	assert.True(t, apierrors.IsNotFound(c.Get(ctx, key, &corev1.Service{})))
	require.NoError(t, c.Get(ctx, key, &corev1.Secret{}), "the credentials stay with the data")
	assert.NotEqual(t, dbv1.ReasonArchiveStarting, out.Condition.Reason)
}

// TestANewDatabaseGetsTheVolumeRepositoryAndAnOldOneKeepsItsDumps: with
// spec.backup.volumeRepository unset, a new Database archives into the
// repository on its backup volume (its S3 server made, the dump CronJob
// suspended and recording the decision), while a Database made before that
// default (its CronJob carries no record) keeps its scheduled dumps and
// gets no repository: an upgrade moves nobody off their dumps.
func TestANewDatabaseGetsTheVolumeRepositoryAndAnOldOneKeepsItsDumps(t *testing.T) {
	ctx := context.Background()
	fresh := facettest.Database()
	old := facettest.Database()
	old.Name, old.UID = "legacy", "legacy-uid"
	oldCron := &batchv1.CronJob{
		// as an earlier dbkeeper made it: its labels and owner, no record
		ObjectMeta: metav1.ObjectMeta{Namespace: old.Namespace, Name: resources.BackupName(old), Labels: resources.Labels(old, resources.ComponentBackup),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: dbv1.GroupVersion.String(), Kind: "Database", Name: old.Name, UID: old.UID, Controller: ptr.To(true)}}},
		Spec: batchv1.CronJobSpec{Schedule: "0 3 * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "backup", Image: "postgres"}}}}}}},
	}
	c := facettest.Client(t, fresh, old, oldCron)
	s := newSyncer(c, facet.WriterFor(c, &events.FakeRecorder{}, Name), func() time.Time { return t0 })
	r := facet.NewReconciler(c, s.writer, dbv1.ConditionBackupReady, s, facet.Options{Facets: []string{dbv1.ConditionBackupReady}})
	key := func(db *dbv1.Database, name string) client.ObjectKey {
		return client.ObjectKey{Namespace: db.Namespace, Name: name}
	}
	reconcile := func(db *dbv1.Database) *batchv1.CronJob {
		t.Helper()
		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)})
		require.NoError(t, err)
		cron := &batchv1.CronJob{}
		require.NoError(t, c.Get(ctx, key(db, resources.BackupName(db)), cron))
		return cron
	}

	for range 2 { // the decision sticks
		cron := reconcile(fresh)
		assert.True(t, *cron.Spec.Suspend, "base backups and the archive replace the dumps")
		assert.Equal(t, dbv1.VolumeRepositoryEnabled, cron.Annotations[resources.AnnotationVolumeRepository])
		require.NoError(t, c.Get(ctx, key(fresh, resources.VolumeRepositoryName(fresh)), &appsv1.StatefulSet{}), "the repository's server")
		got := &dbv1.Database{}
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(fresh), got))
		assert.Empty(t, got.Spec.Backup.VolumeRepository, "the resolution stays in memory: the spec is the user's")
	}

	for range 2 {
		cron := reconcile(old)
		assert.False(t, *cron.Spec.Suspend, "the dumps go on")
		assert.Equal(t, dbv1.VolumeRepositoryDisabled, cron.Annotations[resources.AnnotationVolumeRepository])
		assert.True(t, apierrors.IsNotFound(c.Get(ctx, key(old, resources.VolumeRepositoryName(old)), &appsv1.StatefulSet{})))
	}

	// the user moves the old one: set Enabled, then unset again, and it
	// stays on the repository.
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(old), old))
	old.Spec.Backup.VolumeRepository = dbv1.VolumeRepositoryEnabled
	require.NoError(t, c.Update(ctx, old))
	assert.True(t, *reconcile(old).Spec.Suspend)
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(old), old))
	old.Spec.Backup.VolumeRepository = ""
	require.NoError(t, c.Update(ctx, old))
	assert.True(t, *reconcile(old).Spec.Suspend, "unset again, the recorded decision holds")

	// with the backup controller disabled, nothing would serve a
	// repository: unset means Disabled for every other controller.
	other := &dbv1.Database{Spec: dbv1.DatabaseSpec{}}
	other.Name, other.Namespace = "other", fresh.Namespace
	require.NoError(t, facet.ResolveVolumeRepository(ctx, c, other, false))
	assert.Equal(t, dbv1.VolumeRepositoryDisabled, other.Spec.Backup.VolumeRepository)
}
