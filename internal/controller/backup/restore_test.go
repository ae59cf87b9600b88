package backup

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestRestoreProgress: a restore Job that its pod failure policy failed
// (the restore command's refusal) reads RestoreRefused and says what to
// do; other failures read RestoreFailed; a running Job Restoring; a
// succeeded one nothing.
func TestRestoreProgress(t *testing.T) {
	db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}}
	db.Spec.Bootstrap = &dbv1.BootstrapSpec{FromBackup: &dbv1.BootstrapFromBackup{Database: "orders", File: "latest"}}
	failedBy := func(reason, message string) *batchv1.Job {
		return &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: reason},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: reason, Message: message},
		}}}
	}
	cases := map[string]struct {
		job    *batchv1.Job
		reason string
		says   []string
	}{
		"running": {&batchv1.Job{}, dbv1.ReasonRestoring, []string{"orders/latest", "orders-restore"}},
		"refused": {
			failedBy(batchv1.JobReasonPodFailurePolicy, "Container restore for pod shop/orders-restore-x failed with exit code 42 matching FailJob rule at index 0"),
			dbv1.ReasonRestoreRefused,
			[]string{"orders-restore", "orders/latest", "data-orders-0", "already holds data", "without spec.bootstrap", "kubectl logs job/orders-restore"},
		},
		"failed": {
			failedBy(batchv1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit"),
			dbv1.ReasonRestoreFailed,
			[]string{"orders-restore", "BackoffLimitExceeded", "delete the Job to retry"},
		},
		"succeeded": {&batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue},
		}}}, "", nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cond := RestoreProgress(db, tc.job, "orders/latest")
			if tc.reason == "" {
				assert.Nil(t, cond)
				return
			}
			require.NotNil(t, cond)
			assert.Equal(t, metav1.ConditionFalse, cond.Status)
			assert.Equal(t, tc.reason, cond.Reason)
			for _, s := range tc.says {
				assert.Contains(t, cond.Message, s)
			}
		})
	}
}

// TestRestoreNeedsTheSourcesConsent: a dump restore from another
// Database of the same namespace starts only once the source's annotation
// lists the namespace (before, any Database could copy another's data);
// a refusal names the annotation and the command, makes no Job, and is
// looked at again; consent withdrawn after the Job started does not stop
// it. The Job logs in as the application, not the superuser (no
// superuser Secret, no client certificate). A Database's own predecessor
// and a source that no longer exists (its Retained volume) need no
// consent.
func TestRestoreNeedsTheSourcesConsent(t *testing.T) {
	ctx := context.Background()
	key := func(db *dbv1.Database) client.ObjectKey {
		return client.ObjectKey{Namespace: db.Namespace, Name: resources.RestoreJobName(db)}
	}
	restoring := func(from string) *dbv1.Database {
		db := facettest.Database()
		db.Spec.Bootstrap = &dbv1.BootstrapSpec{FromBackup: &dbv1.BootstrapFromBackup{Database: from, File: "latest"}}
		return db
	}

	t.Run("another Database", func(t *testing.T) {
		db := restoring("old")
		source := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: "old", UID: "old-uid"},
			Spec: dbv1.DatabaseSpec{Engine: dbv1.EnginePostgres, Version: "17"}}
		c := facettest.Client(t, db, source)
		s := newSyncer(c, facet.WriterFor(c, &events.FakeRecorder{}, Name), time.Now)

		out, err := s.Sync(ctx, db)
		require.NoError(t, err)
		assert.Equal(t, dbv1.ReasonRecoveryRefused, out.Condition.Reason)
		for _, says := range []string{"spec.bootstrap.fromBackup.database", "shop/old", dbv1.AnnotationRestoreAllowedNamespaces,
			"kubectl annotate database -n shop old " + dbv1.AnnotationRestoreAllowedNamespaces + "=shop"} {
			assert.Contains(t, out.Condition.Message, says)
		}
		assert.Equal(t, restoringRecheck, out.RequeueAfter)
		assert.True(t, apierrors.IsNotFound(c.Get(ctx, key(db), &batchv1.Job{})), "the restore started without consent")

		source.Annotations = map[string]string{dbv1.AnnotationRestoreAllowedNamespaces: "dev, shop"}
		require.NoError(t, c.Update(ctx, source))
		out, err = s.Sync(ctx, db)
		require.NoError(t, err)
		assert.Equal(t, dbv1.ReasonRestoring, out.Condition.Reason)
		job := &batchv1.Job{}
		require.NoError(t, c.Get(ctx, key(db), job))
		pod := job.Spec.Template.Spec
		for _, e := range pod.Containers[0].Env {
			assert.NotContains(t, []string{"PGSSLCERT", "PGSSLKEY"}, e.Name)
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				assert.Equal(t, resources.CredentialsSecretName(db), e.ValueFrom.SecretKeyRef.Name, "env %s", e.Name)
			}
		}
		for _, v := range pod.Volumes {
			if v.Secret != nil {
				assert.Equal(t, resources.TLSSecretName(db), v.Secret.SecretName, "volume %s", v.Name)
				assert.Equal(t, []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}, v.Secret.Items, "volume %s: only the CA", v.Name)
			}
		}

		source.Annotations = nil
		require.NoError(t, c.Update(ctx, source))
		out, err = s.Sync(ctx, db)
		require.NoError(t, err)
		assert.Equal(t, dbv1.ReasonRestoring, out.Condition.Reason, "a started restore goes on")
		job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
		require.NoError(t, c.Status().Update(ctx, job))
		out, err = s.Sync(ctx, db)
		require.NoError(t, err)
		require.NotNil(t, out.Status.Backup)
		assert.Equal(t, "old/latest", *out.Status.Backup.RestoredFrom, "the restore finished")
	})

	for name, db := range map[string]*dbv1.Database{
		"its own predecessor":            restoring("orders"),
		"a source that no longer exists": restoring("dropped"),
	} {
		t.Run(name, func(t *testing.T) {
			c := facettest.Client(t, db)
			s := newSyncer(c, facet.WriterFor(c, &events.FakeRecorder{}, Name), time.Now)
			out, err := s.Sync(ctx, db)
			require.NoError(t, err)
			assert.Equal(t, dbv1.ReasonRestoring, out.Condition.Reason)
			assert.NoError(t, c.Get(ctx, key(db), &batchv1.Job{}))
		})
	}
}
