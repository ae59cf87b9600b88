package jobs

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	batchv1ac "k8s.io/client-go/applyconfigurations/batch/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/dbkeeper/dbkeeper/internal/apply"
)

// TestFinished reads a Job's end, its time and its failure message off its
// conditions; a Job without a true Complete or Failed condition runs.
func TestFinished(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	cond := func(typ batchv1.JobConditionType, status corev1.ConditionStatus, reason, message string) batchv1.JobCondition {
		return batchv1.JobCondition{Type: typ, Status: status, Reason: reason, Message: message, LastTransitionTime: metav1.NewTime(t0)}
	}
	completed := func(at *metav1.Time) *batchv1.Job {
		return &batchv1.Job{Status: batchv1.JobStatus{CompletionTime: at,
			Conditions: []batchv1.JobCondition{cond(batchv1.JobComplete, corev1.ConditionTrue, "", "")}}}
	}
	cases := []struct {
		name         string
		job          *batchv1.Job
		done, failed bool
		at           time.Time
		msg          string
	}{
		{name: "new", job: &batchv1.Job{}},
		{name: "a false condition", job: &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{
			cond(batchv1.JobFailed, corev1.ConditionFalse, "BackoffLimitExceeded", "")}}}},
		{name: "complete at its completion time", job: completed(&metav1.Time{Time: t0.Add(time.Minute)}), done: true, at: t0.Add(time.Minute)},
		{name: "complete without a completion time", job: completed(nil), done: true, at: t0},
		{name: "failed", job: &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{
			cond(batchv1.JobFailed, corev1.ConditionTrue, "DeadlineExceeded", "Job was active longer than specified deadline")}}},
			done: true, failed: true, at: t0, msg: "DeadlineExceeded: Job was active longer than specified deadline"},
		{name: "failed without a message", job: &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{
			cond(batchv1.JobFailed, corev1.ConditionTrue, "BackoffLimitExceeded", "")}}},
			done: true, failed: true, at: t0, msg: "BackoffLimitExceeded"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			done, failed, at, msg := Finished(tc.job)
			assert.Equal(t, tc.done, done)
			assert.Equal(t, tc.failed, failed)
			assert.True(t, tc.at.Equal(at), "at %s, want %s", at, tc.at)
			assert.Equal(t, tc.msg, msg)
		})
	}
}

// TestEnsure: a missing Job is created and returned without status; an
// existing one is returned as it is, never updated.
func TestEnsure(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().Build()
	desired := func(image string) *batchv1ac.JobApplyConfiguration {
		return batchv1ac.Job("orders-final-backup", "shop").WithSpec(batchv1ac.JobSpec().WithTemplate(
			corev1ac.PodTemplateSpec().WithSpec(corev1ac.PodSpec().WithRestartPolicy(corev1.RestartPolicyNever).
				WithContainers(corev1ac.Container().WithName("backup").WithImage(image)))))
	}

	w := apply.NewWriter(c, "dbkeeper-test")
	job, created, err := Ensure(ctx, c, w, desired("postgres:17"))
	require.NoError(t, err)
	assert.True(t, created)
	assert.Empty(t, job.Status.Conditions)

	job, created, err = Ensure(ctx, c, w, desired("postgres:18"))
	require.NoError(t, err)
	assert.False(t, created)
	assert.Equal(t, "orders-final-backup", job.Name)
	live := &batchv1.Job{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders-final-backup"}, live))
	assert.Equal(t, "postgres:17", live.Spec.Template.Spec.Containers[0].Image, "an existing Job was updated")
}
