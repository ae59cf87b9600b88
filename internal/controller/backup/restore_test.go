package backup

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
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
