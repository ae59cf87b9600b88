package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/manager"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/cluster"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
)

// TestDatabaseGoesReady: the pods run, the Service has endpoints, and the
// pods get their credentials from the Secret.
func TestDatabaseGoesReady(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, ns)
	ctx := context.Background()
	db := newDatabase(ns, "shop")
	require.NoError(t, k8s.Create(ctx, db))
	live := waitReady(t, db)
	assert.Equal(t, dbv1.PhaseReady, live.Status.Phase)
	assert.Equal(t, int32(1), live.Status.ReadyReplicas)

	pod := &corev1.Pod{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop-0"}, pod))
	assert.Equal(t, corev1.PodRunning, pod.Status.Phase)
	assert.Equal(t, cluster.NodeName, pod.Spec.NodeName)
	assert.True(t, podReady(pod), "pod shop-0 is not Ready")

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		slices := &discoveryv1.EndpointSliceList{}
		require.NoError(c, k8s.List(ctx, slices, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: "shop"}))
		ready := 0
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if ptr.Deref(e.Conditions.Ready, false) {
					ready++
				}
			}
		}
		assert.Equal(c, 1, ready, "ready endpoints of Service shop")
	}, timeout, tick)

	sts := &appsv1.StatefulSet{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop"}, sts))
	refs := map[string]string{}
	for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			refs[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
	}
	// initdb's superuser comes from the superuser Secret, the agent's
	// token and the replication role's password from the replication
	// Secret; the application's Secret is not the engine pod's.
	assert.Equal(t, map[string]string{"POSTGRES_PASSWORD": "shop-superuser/password", "POSTGRES_USER": "shop-superuser/username",
		"DBKEEPER_AGENT_TOKEN": "shop-replication/agent-token", "DBKEEPER_REPLICATION_PASSWORD": "shop-replication/password"}, refs)

	pvc := &corev1.PersistentVolumeClaim{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "data-shop-0"}, pvc))
	assert.Equal(t, corev1.ClaimBound, pvc.Status.Phase)
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// readyHistory records every Ready condition the Database's watch shows.
type readyHistory struct {
	mu   sync.Mutex
	seen []metav1.Condition
}

// watchReady follows the Database's Ready condition until the test ends.
func watchReady(t *testing.T, db *dbv1.Database) *readyHistory {
	t.Helper()
	wc, err := client.NewWithWatch(local.Config, client.Options{Scheme: manager.Scheme()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	w, err := wc.Watch(ctx, &dbv1.DatabaseList{}, client.InNamespace(db.Namespace),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", db.Name)})
	require.NoError(t, err)
	h := &readyHistory{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if got, ok := ev.Object.(*dbv1.Database); ok {
				if c := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionReady); c != nil {
					h.mu.Lock()
					h.seen = append(h.seen, *c)
					h.mu.Unlock()
				}
			}
		}
	}()
	t.Cleanup(func() { w.Stop(); cancel(); <-done })
	return h
}

// sawFalseAt reports whether Ready was False for the given generation.
func (h *readyHistory) sawFalseAt(generation int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.seen {
		if c.ObservedGeneration == generation && c.Status == metav1.ConditionFalse {
			return true
		}
	}
	return false
}

// TestScaleAndRollout: a new image rolls the StatefulSet, replicas 1→0→1
// stop and start it, and Ready is False while it rolls and True after.
func TestScaleAndRollout(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, ns)
	ctx := context.Background()
	db := newDatabase(ns, "roll")
	require.NoError(t, k8s.Create(ctx, db))
	waitReady(t, db)
	history := watchReady(t, db)

	stsReady := func(replicas int32, image string) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			sts := &appsv1.StatefulSet{}
			require.NoError(c, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "roll"}, sts))
			assert.Equal(c, replicas, sts.Status.ReadyReplicas)
			assert.Equal(c, replicas, sts.Status.Replicas)
			assert.Equal(c, image, sts.Spec.Template.Spec.Containers[0].Image)
			assert.Equal(c, sts.Status.UpdateRevision, sts.Status.CurrentRevision)
		}, timeout, tick)
	}

	live := patchDatabase(t, db, func(d *dbv1.Database) { d.Spec.Image = "registry.example.com/postgres:17.6-patched" })
	live = waitReady(t, db)
	stsReady(1, "registry.example.com/postgres:17.6-patched")
	assert.True(t, history.sawFalseAt(live.Generation), "Ready never went False while rolling the image")

	live = patchDatabase(t, db, func(d *dbv1.Database) { d.Spec.Replicas = ptr.To[int32](0) })
	live = waitReady(t, db)
	stsReady(0, "registry.example.com/postgres:17.6-patched")
	assert.Equal(t, dbv1.ReasonScaledToZero, meta.FindStatusCondition(live.Status.Conditions, dbv1.ConditionStatefulSetReady).Reason)

	patchDatabase(t, db, func(d *dbv1.Database) { d.Spec.Replicas = ptr.To[int32](1) })
	live = waitReady(t, db)
	stsReady(1, "registry.example.com/postgres:17.6-patched")
	assert.Equal(t, int32(1), live.Status.ReadyReplicas)
}

// TestBackupJobsShowInStatus: a scheduled Job that succeeds moves
// lastSuccessfulTime; a scheduled one that fails makes BackupReady False,
// naming it, in the reconcile that sees it fail.
func TestBackupJobsShowInStatus(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, ns)
	ctx := context.Background()
	db := newDatabase(ns, "dumps", func(d *dbv1.Database) { d.Spec.Backup.Schedule = "* * * * *" })
	require.NoError(t, k8s.Create(ctx, db))
	waitReady(t, db)

	// The CronJob controller starts a Job within a minute; kwok completes it.
	var success metav1.Time
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		live := getDatabase(c, db)
		if assert.NotNil(c, live.Status.Backup, "no backup status yet") &&
			assert.NotNil(c, live.Status.Backup.LastSuccessfulTime, "no successful backup yet") {
			success = *live.Status.Backup.LastSuccessfulTime
			assert.NotEmpty(c, live.Status.Backup.LastJob)
		}
	}, 3*time.Minute, tick)
	cond := waitCondition(t, db, dbv1.ConditionBackupReady, metav1.ConditionTrue, dbv1.ReasonBackupScheduled)
	assert.Contains(t, cond.Message, "succeeded at")
	t.Logf("first scheduled backup succeeded at %s", success.UTC())

	// Another tool labels the CronJob's pods so that they fail (its field,
	// which dbkeeper keeps); the next scheduled Job fails and shows at once.
	cron := &batchv1.CronJob{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.BackupName(db)}, cron))
	patch := client.MergeFrom(cron.DeepCopy())
	cron.Spec.JobTemplate.Spec.Template.Labels[cluster.OutcomeLabel] = cluster.OutcomeFail
	require.NoError(t, k8s.Patch(ctx, cron, patch, client.FieldOwner("e2e-chaos")))

	var failed batchv1.Job
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		jobs := &batchv1.JobList{}
		require.NoError(c, k8s.List(ctx, jobs, client.InNamespace(ns)))
		for _, j := range jobs.Items {
			for _, jc := range j.Status.Conditions {
				if jc.Type == batchv1.JobFailed && jc.Status == corev1.ConditionTrue && metav1.IsControlledBy(&j, cron) {
					failed = j
				}
			}
		}
		assert.NotEmpty(c, failed.Name, "no scheduled backup Job has failed yet")
	}, 3*time.Minute, tick)
	cond = waitCondition(t, db, dbv1.ConditionBackupReady, metav1.ConditionFalse, dbv1.ReasonLastBackupFailed)
	assert.Contains(t, cond.Message, failed.Name)
	var failedAt time.Time
	for _, jc := range failed.Status.Conditions {
		if jc.Type == batchv1.JobFailed {
			failedAt = jc.LastTransitionTime.Time
		}
	}
	lag := cond.LastTransitionTime.Sub(failedAt)
	t.Logf("BackupReady went False %s after Job %s failed", lag, failed.Name)
	assert.Less(t, lag, 3*time.Second, "the failure took more than one reconcile to show")

	live := getDatabase(t, db)
	assert.Equal(t, failed.Name, live.Status.Backup.LastFailedJob)
	assert.NotEmpty(t, live.Status.Backup.LastFailureMessage)
	assert.Equal(t, success, *live.Status.Backup.LastSuccessfulTime, "the last success is kept")
	ready := waitCondition(t, db, dbv1.ConditionReady, metav1.ConditionFalse, dbv1.ReasonLastBackupFailed)
	assert.Contains(t, ready.Message, failed.Name)

	// dbkeeper kept the other tool's label and did not fight over it.
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(cron), cron))
	assert.Equal(t, cluster.OutcomeFail, cron.Spec.JobTemplate.Spec.Template.Labels[cluster.OutcomeLabel])
	assert.Equal(t, "* * * * *", cron.Spec.Schedule)
}

// jobFromCronJob is `kubectl create job --from=cronjob/...`.
func jobFromCronJob(cron *batchv1.CronJob, name string) *batchv1.Job {
	tmpl := cron.Spec.JobTemplate.DeepCopy()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   cron.Namespace,
			Name:        name,
			Labels:      tmpl.Labels,
			Annotations: map[string]string{"cronjob.kubernetes.io/instantiate": "manual"},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cron,
				batchv1.SchemeGroupVersion.WithKind("CronJob"))},
		},
		Spec: tmpl.Spec,
	}
	if job.Spec.Template.Labels == nil {
		job.Spec.Template.Labels = map[string]string{}
	}
	return job
}

// TestDeletionCollectsGarbage: deleting a Database with the Delete policy
// leaves nothing but the backup volume, through real garbage collection.
func TestDeletionCollectsGarbage(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, ns)
	ctx := context.Background()
	db := newDatabase(ns, "gone")
	require.NoError(t, k8s.Create(ctx, db))
	waitReady(t, db)

	require.NoError(t, k8s.Delete(ctx, db))
	owned := map[string]client.Object{
		"StatefulSet":      &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone"}},
		"Service":          &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone"}},
		"headless Service": &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone-headless"}},
		"CronJob":          &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone-backup"}},
		"Secret":           &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone-credentials"}},
		"data PVC":         &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data-gone-0"}},
		"pod":              &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone-0"}},
		"Database":         db,
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for what, obj := range owned {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)
			assert.True(c, apierrors.IsNotFound(err), "%s %s still there (err %v)", what, obj.GetName(), err)
		}
	}, timeout, tick)

	backup := &corev1.PersistentVolumeClaim{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "gone-backup"}, backup), "the Delete policy keeps the backup PVC")
	assert.Empty(t, backup.OwnerReferences)
	assert.True(t, backup.DeletionTimestamp.IsZero())
}

// TestRestartMidConvergence stops the operator a few writes into a new
// Database, starts another, and checks it converges with one of each child
// and the same password.
func TestRestartMidConvergence(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	for _, k := range []int{2, 4, 7} {
		t.Run(fmt.Sprintf("after %d writes", k), func(t *testing.T) {
			first := startOperator(t, ns)
			db := newDatabase(ns, fmt.Sprintf("restart-%d", k))
			require.NoError(t, k8s.Create(ctx, db))
			require.Eventually(t, func() bool { return first.Writes.Len() >= k }, timeout, tick/10)
			first.Stop()
			t.Logf("stopped after: %s", strings.Join(first.Writes.Since(0), "; "))
			secretName := resources.GeneratedSecretName(db)
			before := ""
			if sec := (&corev1.Secret{}); k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: secretName}, sec) == nil {
				before = string(sec.Data["password"])
			}

			startOperator(t, ns)
			live := waitReady(t, db)
			if before != "" {
				assert.Equal(t, before, password(t, ns, secretName), "password changed across the restart")
			}
			assert.Contains(t, live.Finalizers, dbv1.Finalizer)
			dbtest.AssertOneOfEach(t, k8s, live)
		})
	}
}
