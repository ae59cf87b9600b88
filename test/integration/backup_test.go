package integration

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestBackupPodNotStartingIsReported plays the Job controller and a kubelet
// that cannot start the backup container (a Secret key missing): the pod of
// the running Job waits with CreateContainerConfigError, and BackupReady
// says so, naming the Job, the pod and the kubelet's message, instead of
// Scheduled. When the Job is gone, BackupReady is Scheduled again.
func TestBackupPodNotStartingIsReported(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, ns, "backup")
	db := createDatabase(t, newDatabase(ns, "orders"))
	waitCondition(t, db, dbv1.ConditionBackupReady, metav1.ConditionTrue, dbv1.ReasonBackupScheduled)
	ctx := context.Background()

	annotate(t, db, dbv1.AnnotationBackupNow, "t1")
	job := &batchv1.Job{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		db := getDatabase(c, db)
		assert.NoError(c, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.OnDemandBackupJobName(db, "t1")}, job))
	}, timeout, tick)

	// The Job controller's pod, and the kubelet's verdict on it.
	tmpl := job.Spec.Template
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: job.Name + "-x7k2p", Labels: map[string]string{}},
		Spec:       *tmpl.Spec.DeepCopy(),
	}
	for k, v := range tmpl.Labels {
		pod.Labels[k] = v
	}
	pod.Labels[batchv1.JobNameLabel] = job.Name
	pod.Labels[batchv1.ControllerUidLabel] = string(job.UID)
	require.NoError(t, admin.Create(ctx, pod))
	const kubelet = `couldn't find key database in Secret ` + "x/billing-owner"
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
		Name: pod.Spec.Containers[0].Name, Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: kubelet}},
	}}}
	require.NoError(t, admin.Status().Update(ctx, pod))
	now := metav1.Now()
	job.Status = batchv1.JobStatus{Active: 1, StartTime: &now}
	require.NoError(t, admin.Status().Update(ctx, job))

	cond := waitCondition(t, db, dbv1.ConditionBackupReady, metav1.ConditionFalse, dbv1.ReasonBackupPodNotStarting)
	for _, s := range []string{job.Name, pod.Name, "CreateContainerConfigError", kubelet} {
		assert.Contains(t, cond.Message, s)
	}

	require.NoError(t, admin.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)))
	waitCondition(t, db, dbv1.ConditionBackupReady, metav1.ConditionTrue, dbv1.ReasonBackupScheduled)
}

// TestLargerBackupPVCIsKept creates the backup PVC before its Database, as
// the manifest of a Retained volume re-created, and larger than the spec
// asks for (it was grown by hand): a claim cannot shrink, so the larger size
// is kept and the CronJob is applied.
func TestLargerBackupPVCIsKept(t *testing.T) {
	ns := newNamespace(t)
	db := newDatabase(ns, "orders")
	ctx := context.Background()
	large := resource.MustParse("50Gi")
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: resources.BackupName(db), Labels: resources.Labels(db, resources.ComponentBackup)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: large}},
		},
	}
	require.NoError(t, admin.Create(ctx, pvc))
	spec := db.Spec.BackupSize()
	require.Equal(t, -1, spec.Cmp(large), "the spec asks for less than the live volume")

	startOperator(t, ns, "backup")
	createDatabase(t, db)
	waitCondition(t, db, dbv1.ConditionBackupReady, metav1.ConditionTrue, dbv1.ReasonBackupScheduled)
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.BackupName(db)}, &batchv1.CronJob{}))
	require.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(pvc), pvc))
	got := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	assert.Equal(t, large.String(), got.String(), "the PVC keeps its size")
}
