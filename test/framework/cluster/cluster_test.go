package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestCluster checks what the end-to-end suite relies on: StatefulSet pods
// with claims become Ready, Jobs complete or fail on request, and garbage
// collection follows owner references.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cluster; skipped under -short")
	}
	ctx := context.Background()
	c, err := Start(ctx, Options{Progress: testWriter{t}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Stop()) })
	dir := c.Dir

	labels := map[string]string{"app": "web"}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example/none"}}},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			}},
		},
	}
	require.NoError(t, c.Client.Create(ctx, sts))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		got := &appsv1.StatefulSet{}
		require.NoError(ct, c.Client.Get(ctx, client.ObjectKeyFromObject(sts), got))
		assert.Equal(ct, int32(2), got.Status.ReadyReplicas)
	}, time.Minute, 100*time.Millisecond, "StatefulSet pods not Ready:\n%s", c.Log("kube-controller-manager"))

	job := func(name string, podLabels map[string]string) *batchv1.Job {
		return &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: batchv1.JobSpec{
				BackoffLimit: ptr.To[int32](0),
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
					Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
						Containers: []corev1.Container{{Name: "c", Image: "example/none"}}},
				},
			},
		}
	}
	ok, bad := job("ok", nil), job("bad", map[string]string{OutcomeLabel: OutcomeFail})
	require.NoError(t, c.Client.Create(ctx, ok))
	require.NoError(t, c.Client.Create(ctx, bad))
	jobCondition := func(j *batchv1.Job, want batchv1.JobConditionType) func(*assert.CollectT) {
		return func(ct *assert.CollectT) {
			got := &batchv1.Job{}
			require.NoError(ct, c.Client.Get(ctx, client.ObjectKeyFromObject(j), got))
			found := false
			for _, cond := range got.Status.Conditions {
				found = found || (cond.Type == want && cond.Status == corev1.ConditionTrue)
			}
			assert.True(ct, found, "Job %s has no condition %s: %+v", j.Name, want, got.Status)
		}
	}
	require.EventuallyWithT(t, jobCondition(ok, batchv1.JobComplete), time.Minute, 100*time.Millisecond)
	require.EventuallyWithT(t, jobCondition(bad, batchv1.JobFailed), time.Minute, 100*time.Millisecond)

	// The garbage collector removes the StatefulSet's pods with it.
	require.NoError(t, c.Client.Delete(ctx, sts))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		pods := &corev1.PodList{}
		require.NoError(ct, c.Client.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels(labels)))
		assert.Empty(ct, pods.Items)
	}, time.Minute, 100*time.Millisecond)

	require.NoError(t, c.Stop())
	assert.NoDirExists(t, dir, "Stop leaves the cluster directory behind")
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
