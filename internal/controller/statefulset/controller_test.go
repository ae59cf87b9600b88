package statefulset

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestObserve reads StatefulSetReady off the StatefulSet as it was before
// the sync, for each step of a rollout.
func TestObserve(t *testing.T) {
	db := func(replicas int32) *dbv1.Database {
		return &dbv1.Database{Spec: dbv1.DatabaseSpec{Replicas: ptr.To(replicas)}}
	}
	sts := func(mutate func(*appsv1.StatefulSetStatus)) *appsv1.StatefulSet {
		s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
		s.Status = appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: 1, ReadyReplicas: 1, UpdatedReplicas: 1,
			CurrentRevision: "r2", UpdateRevision: "r2"}
		if mutate != nil {
			mutate(&s.Status)
		}
		return s
	}
	cases := []struct {
		name    string
		db      *dbv1.Database
		sts     *appsv1.StatefulSet
		changed bool
		status  metav1.ConditionStatus
		reason  string
		message string
	}{
		{"created", db(1), nil, true, metav1.ConditionFalse, dbv1.ReasonProgressing, "created the StatefulSet"},
		{"updated", db(1), sts(nil), true, metav1.ConditionFalse, dbv1.ReasonProgressing, "updated the StatefulSet"},
		{"not observed", db(1), sts(func(s *appsv1.StatefulSetStatus) { s.ObservedGeneration = 1 }), false,
			metav1.ConditionFalse, dbv1.ReasonProgressing, "observe generation 2"},
		{"rolling out", db(1), sts(func(s *appsv1.StatefulSetStatus) { s.UpdateRevision = "r3"; s.UpdatedReplicas = 0 }), false,
			metav1.ConditionFalse, dbv1.ReasonProgressing, "rolling out: 0 of 1 replicas updated"},
		{"not ready", db(1), sts(func(s *appsv1.StatefulSetStatus) { s.ReadyReplicas = 0 }), false,
			metav1.ConditionFalse, dbv1.ReasonProgressing, "0 of 1 replicas ready"},
		{"ready", db(1), sts(nil), false, metav1.ConditionTrue, dbv1.ReasonStatefulSetReady, "1 of 1 replicas ready"},
		{"scaled to zero", db(0), sts(func(s *appsv1.StatefulSetStatus) { *s = appsv1.StatefulSetStatus{ObservedGeneration: 2} }), false,
			metav1.ConditionTrue, dbv1.ReasonScaledToZero, "no pod runs"},
		{"three ready", db(3), sts(func(s *appsv1.StatefulSetStatus) { s.Replicas, s.ReadyReplicas, s.UpdatedReplicas = 3, 3, 3 }), false,
			metav1.ConditionTrue, dbv1.ReasonStatefulSetReady, "3 of 3 replicas ready"},
		{"scaling down from three to two", db(2), sts(func(s *appsv1.StatefulSetStatus) { s.Replicas, s.ReadyReplicas, s.UpdatedReplicas = 3, 3, 3 }), false,
			metav1.ConditionFalse, dbv1.ReasonProgressing, "scaling down: 3 replicas, 2 wanted"},
		// The primary is ordinal 2: a scale-down to one keeps three pods
		// until the replication controller switched over to ordinal 0.
		{"scaled down under the primary", primaryAt(db(1), 2), sts(func(s *appsv1.StatefulSetStatus) { s.Replicas, s.ReadyReplicas, s.UpdatedReplicas = 3, 3, 3 }), false,
			metav1.ConditionTrue, dbv1.ReasonStatefulSetReady, "3 of 3 replicas ready"},
		// A version past its end of life still runs, and says so once it
		// is ready; while it is not, what is wrong comes first.
		{"ready on an end-of-life version", version(db(1), "14"), sts(nil), false, metav1.ConditionTrue, dbv1.ReasonVersionEndOfLife,
			"1 of 1 replicas ready; postgres 14 reached its end of life on 2026-11-12 and gets no more fixes, security ones included; " +
				"move the data to a Database of a supported version (15, 16, 17, 18) with spec.bootstrap.fromBackup"},
		{"not ready on an end-of-life version", version(db(1), "14"), sts(func(s *appsv1.StatefulSetStatus) { s.ReadyReplicas = 0 }), false,
			metav1.ConditionFalse, dbv1.ReasonProgressing, "0 of 1 replicas ready"},
		{"ready on a supported version", version(db(1), "18"), sts(nil), false, metav1.ConditionTrue, dbv1.ReasonStatefulSetReady, "1 of 1 replicas ready"},
		{"OnDelete rollout waits for the replication controller", db(2), onDelete(sts(func(s *appsv1.StatefulSetStatus) {
			s.Replicas, s.ReadyReplicas, s.UpdatedReplicas, s.UpdateRevision = 2, 2, 1, "r3"
		})), false, metav1.ConditionFalse, dbv1.ReasonProgressing, "1 of 2 replicas updated; the replication controller restarts the others in order"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.db.Name == "" {
				tc.db.Name = "orders"
			}
			got := observe(tc.db, tc.sts, tc.changed, nil, false)
			assert.Equal(t, dbv1.ConditionStatefulSetReady, got.Type)
			assert.Equal(t, tc.status, got.Status)
			assert.Equal(t, tc.reason, got.Reason)
			assert.Contains(t, got.Message, tc.message)
		})
	}
}

// version sets the engine and its major version.
func version(db *dbv1.Database, v string) *dbv1.Database {
	db.Spec.Engine, db.Spec.Version = dbv1.EnginePostgres, v
	return db
}

// primaryAt records the instance of ordinal as the current primary.
func primaryAt(db *dbv1.Database, ordinal int) *dbv1.Database {
	db.Name = "orders"
	db.Status.Replication = &dbv1.ReplicationStatus{CurrentPrimary: resources.InstanceName(db, ordinal)}
	return db
}

func onDelete(sts *appsv1.StatefulSet) *appsv1.StatefulSet {
	sts.Spec.UpdateStrategy.Type = appsv1.OnDeleteStatefulSetStrategyType
	return sts
}

// TestSync: the first sync creates the StatefulSet and reports it
// progressing; the next reads the replica counts off the live StatefulSet
// into the status and grows a data PVC smaller than spec.storage.size,
// with an Event on the Database.
func TestSync(t *testing.T) {
	ctx := context.Background()
	db := facettest.Database()
	db.Spec.Storage.Size = ptr.To(resource.MustParse("2Gi"))
	c := facettest.Client(t, db)
	rec := events.NewFakeRecorder(10)
	s := newSyncer(c, facet.WriterFor(c, rec, Name))

	out, err := s.Sync(ctx, db)
	require.NoError(t, err)
	assert.Equal(t, metav1.ConditionFalse, out.Condition.Status)
	assert.Equal(t, dbv1.ReasonProgressing, out.Condition.Reason)
	assert.Contains(t, out.Condition.Message, "created the StatefulSet")
	sts := &appsv1.StatefulSet{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: resources.StatefulSetName(db)}, sts))
	assert.Equal(t, resources.Labels(db, resources.ComponentDatabase), sts.Labels)

	// The StatefulSet controller ran its pod, and the PVC of ordinal 0
	// was made at the old size.
	sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: 1, ReadyReplicas: 1, UpdatedReplicas: 1}
	require.NoError(t, c.Status().Update(ctx, sts))
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: resources.DataPVCName(db, 0),
		Labels: resources.Labels(db, resources.ComponentDatabase)}}
	pvc.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	require.NoError(t, c.Create(ctx, pvc))

	out, err = s.Sync(ctx, db)
	require.NoError(t, err)
	assert.Equal(t, metav1.ConditionTrue, out.Condition.Status, out.Condition.Message)
	assert.Equal(t, dbv1.ReasonStatefulSetReady, out.Condition.Reason)
	require.NotNil(t, out.Status.Replicas)
	assert.Equal(t, int32(1), *out.Status.ReadyReplicas)
	assert.NotEmpty(t, *out.Status.Selector)
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pvc), pvc))
	assert.Equal(t, "2Gi", pvc.Spec.Resources.Requests.Storage().String(), "the data PVC grew")
	require.Len(t, rec.Events, 1)
	assert.Equal(t, "Normal "+ReasonVolumeGrowing+" Growing data PVC "+pvc.Name+" from 1Gi to 2Gi", <-rec.Events)

	_, err = s.Sync(ctx, db)
	require.NoError(t, err)
	assert.Empty(t, rec.Events, "an Event without a repair")
}

// TestReconcileReportsWhyPodsAreNotReady: a Database whose engine pod
// cannot pull its image reports StatefulSetReady=False, ImagePullFailed,
// naming the pod and spec.image; once the pod is ready, True.
func TestReconcileReportsWhyPodsAreNotReady(t *testing.T) {
	ctx := context.Background()
	db := facettest.Database()
	db.Spec.Image = "registry.example/postgres:17-typo"
	c := facettest.Client(t, db)
	rec := events.NewFakeRecorder(10)
	w := facet.WriterFor(c, rec, Name)
	r := facet.NewReconciler(c, w, dbv1.ConditionStatefulSetReady, newSyncer(c, w), facet.Options{})
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)}
	stored := func() metav1.Condition {
		t.Helper()
		got := &dbv1.Database{}
		require.NoError(t, c.Get(ctx, req.NamespacedName, got))
		cond := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionStatefulSetReady)
		require.NotNil(t, cond)
		return *cond
	}

	_, err := r.Reconcile(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, dbv1.ReasonProgressing, stored().Reason)
	require.Len(t, rec.Events, 1)
	assert.Contains(t, <-rec.Events, "Normal Progressing StatefulSetReady is False")

	// The StatefulSet controller made pod orders-0, whose image the
	// kubelet cannot pull.
	sts := &appsv1.StatefulSet{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: resources.StatefulSetName(db)}, sts))
	sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: 1, UpdatedReplicas: 1,
		CurrentRevision: "orders-1", UpdateRevision: "orders-1"}
	require.NoError(t, c.Status().Update(ctx, sts))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-0", Labels: sts.Spec.Template.Labels},
		Spec:       sts.Spec.Template.Spec,
	}
	pod.Labels[appsv1.ControllerRevisionHashLabelKey] = "orders-1"
	require.NoError(t, c.Create(ctx, pod))
	pod.Status = corev1.PodStatus{
		Phase:      corev1.PodPending,
		Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionFalse}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: pod.Spec.Containers[0].Name, Image: db.Spec.Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff",
				Message: `Back-off pulling image "registry.example/postgres:17-typo"`}}}},
	}
	require.NoError(t, c.Status().Update(ctx, pod))

	_, err = r.Reconcile(ctx, req)
	require.NoError(t, err)
	cond := stored()
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Equal(t, dbv1.ReasonImagePullFailed, cond.Reason)
	assert.Equal(t, `pod orders-0: container engine cannot pull image "registry.example/postgres:17-typo": `+
		`ImagePullBackOff: Back-off pulling image "registry.example/postgres:17-typo"; fix spec.image`, cond.Message)
	// The status stayed False, so the condition's Writer records no Event;
	// the news does get one, a Warning.
	require.Len(t, rec.Events, 1)
	assert.Equal(t, "Warning ImagePullFailed StatefulSetReady is False: "+cond.Message, <-rec.Events)

	// Another reconcile of the same situation writes nothing.
	before := &dbv1.Database{}
	require.NoError(t, c.Get(ctx, req.NamespacedName, before))
	_, err = r.Reconcile(ctx, req)
	require.NoError(t, err)
	after := &dbv1.Database{}
	require.NoError(t, c.Get(ctx, req.NamespacedName, after))
	assert.Equal(t, before.ResourceVersion, after.ResourceVersion, "a write without a change")
	assert.Empty(t, rec.Events, "an Event without a change")

	// The image is fixed (by hand, on the registry), the pod runs and is
	// ready.
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions[1].Status = corev1.ConditionTrue
	pod.Status.ContainerStatuses[0].Ready = true
	pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	require.NoError(t, c.Status().Update(ctx, pod))
	sts.Status.ReadyReplicas, sts.Status.AvailableReplicas = 1, 1
	require.NoError(t, c.Status().Update(ctx, sts))

	_, err = r.Reconcile(ctx, req)
	require.NoError(t, err)
	cond = stored()
	assert.Equal(t, metav1.ConditionTrue, cond.Status, cond.Message)
	assert.Equal(t, dbv1.ReasonStatefulSetReady, cond.Reason)
	require.Len(t, rec.Events, 1)
	assert.Contains(t, <-rec.Events, "Normal Ready StatefulSetReady is True")
}

// TestDisruptionBudgetAndPrimary: with two instances or more the engine
// pods get two PodDisruptionBudgets owned by the Database: the standbys'
// that lets one go at a time, and the primary's that refuses to evict it (a
// drain waits for the switchover); each selects one role, as the
// eviction API refuses a pod with two budgets. Unhealthy pods may always
// go. A scale-down to one deletes both. The StatefulSet never runs
// fewer pods than the primary's ordinal + 1: the replication controller
// switches over before the primary's pod may go.
func TestDisruptionBudgetAndPrimary(t *testing.T) {
	ctx := context.Background()
	db := facettest.Database()
	db.Spec.Replicas = ptr.To[int32](3)
	c := facettest.Client(t, db)
	s := newSyncer(c, facet.WriterFor(c, events.NewFakeRecorder(10), Name))
	s.agentImage = "registry.example.com/dbkeeper:1.0"

	_, err := s.Sync(ctx, db)
	require.NoError(t, err)
	pdb := &policyv1.PodDisruptionBudget{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Name}, pdb))
	assert.Equal(t, intstr.FromInt32(1), *pdb.Spec.MinAvailable, "of two standbys, one may go")
	assert.Nil(t, pdb.Spec.MaxUnavailable)
	standbys := resources.PodSelectorLabels(db)
	standbys[dbv1.LabelRole] = dbv1.RoleReplica
	assert.Equal(t, standbys, pdb.Spec.Selector.MatchLabels)
	assert.Equal(t, policyv1.AlwaysAllow, *pdb.Spec.UnhealthyPodEvictionPolicy)
	assert.True(t, metav1.IsControlledBy(pdb, db), "owned by the Database")
	primary := &policyv1.PodDisruptionBudget{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Name + "-primary"}, primary))
	assert.Equal(t, intstr.FromInt32(0), *primary.Spec.MaxUnavailable, "the healthy primary is never evicted")
	assert.Nil(t, primary.Spec.MinAvailable)
	sel, err := metav1.LabelSelectorAsSelector(primary.Spec.Selector)
	require.NoError(t, err)
	pod := resources.Labels(db, resources.ComponentDatabase)
	for role, selected := range map[string]bool{dbv1.RolePrimary: true, "": true, dbv1.RoleReplica: false} {
		pod[dbv1.LabelRole] = role
		if role == "" {
			delete(pod, dbv1.LabelRole) // in doubt during a switchover
		}
		assert.Equal(t, selected, sel.Matches(labels.Set(pod)), "the primary's budget selects a pod of role %q", role)
	}
	assert.Equal(t, policyv1.AlwaysAllow, *primary.Spec.UnhealthyPodEvictionPolicy)
	assert.True(t, metav1.IsControlledBy(primary, db), "owned by the Database")
	sts := &appsv1.StatefulSet{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Name}, sts))
	assert.Equal(t, int32(3), *sts.Spec.Replicas)
	assert.Equal(t, "registry.example.com/dbkeeper:1.0", sts.Spec.Template.Spec.InitContainers[0].Image)

	// Scaled down to one while the primary is the third pod: three pods
	// stay, and so does the budget.
	db.Spec.Replicas = ptr.To[int32](1)
	db.Status.Replication = &dbv1.ReplicationStatus{CurrentPrimary: resources.InstanceName(db, 2)}
	_, err = s.Sync(ctx, db)
	require.NoError(t, err)
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(sts), sts))
	assert.Equal(t, int32(3), *sts.Spec.Replicas, "the primary's pod stays")
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pdb), pdb))

	// Switched over to the first pod: one pod, no budget.
	db.Status.Replication.CurrentPrimary = resources.InstanceName(db, 0)
	_, err = s.Sync(ctx, db)
	require.NoError(t, err)
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(sts), sts))
	assert.Equal(t, int32(1), *sts.Spec.Replicas)
	for _, b := range []*policyv1.PodDisruptionBudget{pdb, primary} {
		err = c.Get(ctx, client.ObjectKeyFromObject(b), &policyv1.PodDisruptionBudget{})
		assert.True(t, apierrors.IsNotFound(err), "budget %s is gone: %v", b.Name, err)
	}

	// Another sync without a budget to delete is quiet.
	_, err = s.Sync(ctx, db)
	require.NoError(t, err)
}

// TestOrphanedStatefulSetIsNotAdoptedBack replays the race that lost a
// StatefulSet in CI (e2e TestDeletionMatrix, wipeout-orphan-nocleanup):
// the Database is deleted with orphan propagation, the garbage collector
// removes the StatefulSet's owner reference, and its update wakes the
// controller while the cached Database does not show the deletion yet. An
// apply would write the reference back, and the collector would then delete
// the StatefulSet the user asked to keep. The sync sends nothing, and the
// reconciler takes that as no error (the deletion brings it back).
func TestOrphanedStatefulSetIsNotAdoptedBack(t *testing.T) {
	ctx := context.Background()
	cached := facettest.Database()
	c := facettest.Client(t, cached)
	w := facet.WriterFor(c, events.NewFakeRecorder(10), Name)
	_, err := newSyncer(c, w).Sync(ctx, cached)
	require.NoError(t, err)
	key := client.ObjectKey{Namespace: "shop", Name: resources.StatefulSetName(cached)}
	sts := &appsv1.StatefulSet{}
	require.NoError(t, c.Get(ctx, key, sts))
	require.Len(t, sts.OwnerReferences, 1)

	// kubectl delete --cascade=orphan: the Database is being deleted, and
	// the collector orphans its children.
	live := &dbv1.Database{}
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(cached), live))
	require.NoError(t, c.Delete(ctx, live, client.PropagationPolicy(metav1.DeletePropagationOrphan)))
	sts.OwnerReferences = nil
	require.NoError(t, c.Update(ctx, sts))

	_, err = newSyncer(c, w).Sync(ctx, cached)
	require.ErrorIs(t, err, facet.ErrOwnerDeleted)
	require.NoError(t, c.Get(ctx, key, sts))
	assert.Empty(t, sts.OwnerReferences, "the orphaned StatefulSet was adopted back: the collector would delete it")

	r := facet.NewReconciler(&staleDatabase{Client: c, db: cached}, w, dbv1.ConditionStatefulSetReady, newSyncer(c, w), facet.Options{})
	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cached)})
	require.NoError(t, err)
	assert.Zero(t, res)
	require.NoError(t, c.Get(ctx, key, sts))
	assert.Empty(t, sts.OwnerReferences)
}

// staleDatabase is a client whose cache has not seen the Database's
// deletion yet: it reads db for it.
type staleDatabase struct {
	client.Client
	db *dbv1.Database
}

func (s *staleDatabase) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if d, ok := obj.(*dbv1.Database); ok && key == client.ObjectKeyFromObject(s.db) {
		s.db.DeepCopyInto(d)
		return nil
	}
	return s.Client.Get(ctx, key, obj, opts...)
}

// TestObserveAgentsInPlace: a StatefulSet whose new revision changed only
// the agent's image, while the agents take over in place, is not rolling
// out once every pod carries the template's restart hash; a pod of
// another hash, one missing, or a template without a hash, is.
func TestObserveAgentsInPlace(t *testing.T) {
	db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "orders"}, Spec: dbv1.DatabaseSpec{Replicas: ptr.To[int32](2)}}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "orders", Generation: 3}}
	sts.Spec.Template.Annotations = map[string]string{resources.AnnotationRestartHash: "h1"}
	sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: 3, Replicas: 2, ReadyReplicas: 2, UpdatedReplicas: 0,
		CurrentRevision: "r1", UpdateRevision: "r2"}
	pod := func(name, hash string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{resources.AnnotationRestartHash: hash}}}
	}
	current := []corev1.Pod{pod("orders-0", "h1"), pod("orders-1", "h1")}
	assert.True(t, runsTemplateInPlace(db, sts, current, 2))
	assert.False(t, runsTemplateInPlace(db, sts, []corev1.Pod{pod("orders-0", "h1"), pod("orders-1", "h0")}, 2), "a pod to restart")
	assert.False(t, runsTemplateInPlace(db, sts, current[:1], 2), "a pod missing")
	noHash := sts.DeepCopy()
	noHash.Spec.Template.Annotations = nil
	assert.False(t, runsTemplateInPlace(db, noHash, current, 2), "a template without the hash")

	got := observe(db, sts, false, current, true)
	assert.Equal(t, metav1.ConditionTrue, got.Status, got.Message)
	assert.Equal(t, dbv1.ReasonStatefulSetReady, got.Reason)
	got = observe(db, sts, false, current, false)
	assert.Equal(t, dbv1.ReasonProgressing, got.Reason, "without the takeover the pods restart")
	assert.Contains(t, got.Message, "rolling out: 0 of 2 replicas updated")
}
