package backup

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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
	"github.com/dbkeeper/dbkeeper/internal/pki"
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

// TestRestoreJobLogsInWithACertificate: the server takes no superuser
// password over TCP, so the dump restore Job gets a client certificate for
// the superuser, signed by the Database's CA, before it is created (it
// waits, named in the condition, for the Secrets that needs); a sync keeps
// the certificate, and once the restore has finished it is deleted.
func TestRestoreJobLogsInWithACertificate(t *testing.T) {
	ctx := context.Background()
	db := facettest.Database()
	db.Spec.Bootstrap = &dbv1.BootstrapSpec{FromBackup: &dbv1.BootstrapFromBackup{Database: "old", File: "latest"}}
	c := facettest.Client(t, db)
	now := time.Now()
	s := newSyncer(c, facet.WriterFor(c, &events.FakeRecorder{}, Name), func() time.Time { return now })
	key := func(name string) client.ObjectKey { return client.ObjectKey{Namespace: db.Namespace, Name: name} }

	out, err := s.Sync(ctx, db)
	require.NoError(t, err)
	assert.Equal(t, dbv1.ReasonRestoring, out.Condition.Reason)
	assert.Contains(t, out.Condition.Message, "waits for Secret "+resources.SuperuserSecretName(db))
	assert.Equal(t, restoringRecheck, out.RequeueAfter)
	assert.True(t, apierrors.IsNotFound(c.Get(ctx, key(resources.RestoreJobName(db)), &batchv1.Job{})), "the Job started without its certificate")

	ca, err := pki.NewCA("test CA", now)
	require.NoError(t, err)
	require.NoError(t, c.Create(ctx, resources.CASecret(db, ca.Cert, ca.Key)))
	require.NoError(t, c.Create(ctx, resources.SuperuserSecret(db, "postgres", "pw")))
	_, err = s.Sync(ctx, db)
	require.NoError(t, err)
	sec := &corev1.Secret{}
	require.NoError(t, c.Get(ctx, key(resources.RestoreClientSecretName(db)), sec))
	cert, err := pki.ParseCertificate(sec.Data[corev1.TLSCertKey])
	require.NoError(t, err)
	assert.Equal(t, "postgres", cert.Subject.CommonName)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.Cert)
	_, err = cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now.Add(resources.RestoreClientLifetime - time.Minute),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	assert.NoError(t, err, "a client certificate of the CA, valid for the Job's deadline")
	_, err = tls.X509KeyPair(sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey])
	assert.NoError(t, err)
	assert.True(t, resources.Belongs(db, sec))

	job := &batchv1.Job{}
	require.NoError(t, c.Get(ctx, key(resources.RestoreJobName(db)), job))
	env := map[string]string{}
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	assert.Equal(t, "/etc/dbkeeper/tls-client/tls.crt", env["PGSSLCERT"])
	assert.Equal(t, "/etc/dbkeeper/tls-client/tls.key", env["PGSSLKEY"])

	_, err = s.Sync(ctx, db)
	require.NoError(t, err)
	again := &corev1.Secret{}
	require.NoError(t, c.Get(ctx, key(resources.RestoreClientSecretName(db)), again))
	assert.Equal(t, sec.Data, again.Data, "a sync issued another certificate")

	job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	require.NoError(t, c.Status().Update(ctx, job))
	out, err = s.Sync(ctx, db)
	require.NoError(t, err)
	require.NotNil(t, out.Status.Backup)
	assert.Equal(t, "old/latest", *out.Status.Backup.RestoredFrom, "the restore finished")
	assert.True(t, apierrors.IsNotFound(c.Get(ctx, key(resources.RestoreClientSecretName(db)), &corev1.Secret{})),
		"the certificate outlived the restore")
}
