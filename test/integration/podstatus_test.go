package integration

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestPodThatCannotPullIsReported: the statefulset controller watches the
// engine pods (through the operator's cache, with its generated role), so a
// pod whose image cannot be pulled turns StatefulSetReady, and Ready, False
// with ImagePullFailed naming spec.image, without any other event; once
// the pod and the StatefulSet are ready, both are True. envtest runs no
// StatefulSet controller and no kubelet: the test plays both.
func TestPodThatCannotPullIsReported(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns, "*")
	db := createDatabase(t, newDatabase(ns, "typo", func(d *dbv1.Database) { d.Spec.Image = "registry.example/postgres:17-typo" }))

	// The StatefulSet controller observed the StatefulSet and made pod
	// typo-0, not ready yet.
	sts := &appsv1.StatefulSet{}
	key := client.ObjectKey{Namespace: ns, Name: resources.StatefulSetName(db)}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		if !assert.NoError(c, admin.Get(ctx, key, sts)) {
			return
		}
		sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: 1, UpdatedReplicas: 1, CurrentReplicas: 1,
			CurrentRevision: sts.Name + "-1", UpdateRevision: sts.Name + "-1"}
		assert.NoError(c, admin.Status().Update(ctx, sts))
	}, timeout, tick)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cond := condition(c, db, dbv1.ConditionStatefulSetReady)
		if assert.NotNil(c, cond) {
			assert.Equal(c, "0 of 1 replicas ready", cond.Message)
		}
	}, timeout, tick, "the controller has seen the StatefulSet's status: only the pod's events can wake it now")

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sts.Name + "-0", Labels: sts.Spec.Template.Labels},
		Spec:       *sts.Spec.Template.Spec.DeepCopy(),
	}
	pod.Labels[appsv1.ControllerRevisionHashLabelKey] = sts.Name + "-1"
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: resources.DataVolumeName, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: resources.DataPVCName(db, 0)}}})
	require.NoError(t, admin.Create(ctx, pod))
	engine := pod.Spec.Containers[0].Name
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodPending,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse},
		},
		ContainerStatuses: []corev1.ContainerStatus{{Name: engine, Image: db.Spec.Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff",
				Message: `Back-off pulling image "registry.example/postgres:17-typo"`}}}},
	}
	require.NoError(t, admin.Status().Update(ctx, pod))

	cond := waitCondition(t, db, dbv1.ConditionStatefulSetReady, metav1.ConditionFalse, dbv1.ReasonImagePullFailed)
	assert.Equal(t, `pod typo-0: container `+engine+` cannot pull image "registry.example/postgres:17-typo": `+
		`ImagePullBackOff: Back-off pulling image "registry.example/postgres:17-typo"; fix spec.image`, cond.Message)
	ready := waitCondition(t, db, dbv1.ConditionReady, metav1.ConditionFalse, dbv1.ReasonImagePullFailed)
	assert.Contains(t, ready.Message, "fix spec.image")
	assert.Equal(t, dbv1.PhaseDegraded, getDatabase(t, db).Status.Phase)

	// The image is pushed; the pod runs and is ready, and so is the
	// StatefulSet.
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions[1].Status = corev1.ConditionTrue
	pod.Status.ContainerStatuses[0].Ready = true
	pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
	require.NoError(t, admin.Status().Update(ctx, pod))
	markStatefulSetReady(t, db)
	waitCondition(t, db, dbv1.ConditionStatefulSetReady, metav1.ConditionTrue, dbv1.ReasonStatefulSetReady)
	waitCondition(t, db, dbv1.ConditionReady, metav1.ConditionTrue, dbv1.ReasonReady)
}
