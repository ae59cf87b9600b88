package integration

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
)

// TestConverges follows one Database from creation to Ready: every facet
// reports its reason at the current generation, StatefulSetReady stays
// Progressing until the (faked) pods are ready, and Ready follows.
func TestConverges(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, ns, "*")
	db := createDatabase(t, newDatabase(ns, "orders"))

	waitCondition(t, db, dbv1.ConditionServiceReady, metav1.ConditionTrue, dbv1.ReasonServicesReady)
	waitCondition(t, db, dbv1.ConditionCredentialsReady, metav1.ConditionTrue, dbv1.ReasonSecretGenerated)
	waitCondition(t, db, dbv1.ConditionBackupReady, metav1.ConditionTrue, dbv1.ReasonBackupScheduled)
	waitCondition(t, db, dbv1.ConditionStatefulSetReady, metav1.ConditionFalse, dbv1.ReasonProgressing)
	ready := waitCondition(t, db, dbv1.ConditionReady, metav1.ConditionFalse, dbv1.ReasonProgressing)
	assert.Contains(t, ready.Message, dbv1.ConditionStatefulSetReady, "Ready names the facet that holds it back")

	live := getDatabase(t, db)
	assert.Contains(t, live.Finalizers, dbv1.Finalizer)
	assert.Equal(t, dbv1.PhaseProgressing, live.Status.Phase)
	assert.Equal(t, "orders."+ns+".svc:5432", live.Status.Endpoint)
	assert.Equal(t, "orders-credentials", live.Status.CredentialsSecret)

	markStatefulSetReady(t, db)
	waitCondition(t, db, dbv1.ConditionStatefulSetReady, metav1.ConditionTrue, dbv1.ReasonStatefulSetReady)
	waitCondition(t, db, dbv1.ConditionReady, metav1.ConditionTrue, dbv1.ReasonReady)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		live := getDatabase(c, db)
		assert.Equal(c, dbv1.PhaseReady, live.Status.Phase)
		assert.Equal(c, live.Generation, live.Status.ObservedGeneration)
		assert.Equal(c, int32(1), live.Status.ReadyReplicas)
	}, timeout, tick)

	// Every child carries the labels and a controller reference to the
	// Database, except the Secret and the backup PVC, which a deletion
	// policy may keep: they carry none, so that garbage collection can
	// never take them.
	children := []client.Object{
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "orders"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "orders"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "orders-headless"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "orders-credentials"}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "orders-backup"}},
		&batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "orders-backup"}},
	}
	for _, obj := range children {
		require.NoError(t, admin.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: obj.GetName()}, obj), "%T %s", obj, obj.GetName())
		ref := metav1.GetControllerOf(obj)
		if _, pvc := obj.(*corev1.PersistentVolumeClaim); pvc || obj.GetName() == "orders-credentials" {
			assert.Empty(t, obj.GetOwnerReferences(), "%T %s has owner references", obj, obj.GetName())
		} else if assert.NotNil(t, ref, "%T %s has no controller reference", obj, obj.GetName()) {
			assert.Equal(t, live.UID, ref.UID)
			assert.Equal(t, "Database", ref.Kind)
		}
		for _, k := range []string{resources.LabelName, resources.LabelInstance, resources.LabelManagedBy, resources.LabelComponent} {
			assert.NotEmpty(t, obj.GetLabels()[k], "%T %s lacks label %s", obj, obj.GetName(), k)
		}
	}

	// Each transition was announced by an Event on the Database.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		events := &eventsv1.EventList{}
		assert.NoError(c, admin.List(context.Background(), events, client.InNamespace(ns)))
		reasons := map[string]bool{}
		for _, e := range events.Items {
			if e.Regarding.Name == "orders" && e.Regarding.Kind == "Database" {
				reasons[e.Reason] = true
			}
		}
		for _, r := range []string{dbv1.ReasonSecretGenerated, dbv1.ReasonBackupScheduled, dbv1.ReasonProgressing, dbv1.ReasonReady} {
			assert.True(c, reasons[r], "no Event with reason %s (have %v)", r, reasons)
		}
	}, timeout, tick)
}

// TestConditionsHaveTheirOwnFieldManagers checks that each controller owns
// exactly its own condition entry in status, through server-side apply.
func TestConditionsHaveTheirOwnFieldManagers(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, ns, "*")
	db := convergeReady(t, newDatabase(ns, "fields"))

	owners := map[string]string{
		"dbkeeper-statefulset": dbv1.ConditionStatefulSetReady,
		"dbkeeper-service":     dbv1.ConditionServiceReady,
		"dbkeeper-secret":      dbv1.ConditionCredentialsReady,
		"dbkeeper-backup":      dbv1.ConditionBackupReady,
		"dbkeeper-readiness":   dbv1.ConditionReady,
	}
	found := map[string]bool{}
	for _, mf := range db.ManagedFields {
		want, ours := owners[mf.Manager]
		if !ours || mf.Subresource != "status" {
			continue
		}
		found[mf.Manager] = true
		assert.Equal(t, metav1.ManagedFieldsOperationApply, mf.Operation, "%s writes status by apply", mf.Manager)
		fields := string(mf.FieldsV1.Raw)
		for _, condType := range owners {
			key := `k:{\"type\":\"` + condType + `\"}`
			assert.Equal(t, condType == want, strings.Contains(fields, key),
				"manager %s owning condition %s: %s", mf.Manager, condType, fields)
		}
	}
	for m := range owners {
		assert.True(t, found[m], "no status entry of field manager %s", m)
	}
}

// TestConvergedDatabaseGetsNoWrites wakes every controller on a converged
// Database and checks that none of them writes anything, also when the
// status holds zeros (a Database scaled to zero reports replicas: 0, which
// its stored JSON omits).
func TestConvergedDatabaseGetsNoWrites(t *testing.T) {
	for _, replicas := range []int32{1, 0} {
		t.Run(fmt.Sprintf("replicas=%d", replicas), func(t *testing.T) {
			ns := newNamespace(t)
			op := startOperator(t, ns, "*")
			db := newDatabase(ns, "idle")
			db.Spec.Replicas = ptr.To(replicas)
			db = convergeReady(t, db)
			before := op.WaitQuiet(t, quiet, timeout)
			versions := childVersions(t, db)
			counts := reconcileCounts(t)

			annotate(t, db, "example.com/poke", "1")
			annotated := getDatabase(t, db).ResourceVersion
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				now := reconcileCounts(t)
				for _, name := range []string{"statefulset", "service", "secret", "backup", "tls", "replication", "cleanup", "readiness"} {
					assert.Greater(c, now[name], counts[name], "controller %s has not reconciled since the poke", name)
				}
			}, timeout, tick)
			op.WaitQuiet(t, quiet, timeout)

			assert.Empty(t, op.Writes.Since(before), "writes after a no-op reconcile")
			assert.Equal(t, versions, childVersions(t, db), "children's resourceVersions")
			assert.Equal(t, annotated, getDatabase(t, db).ResourceVersion, "the Database's resourceVersion moved after the annotation")
		})
	}
}

// TestRestartedOperatorWritesNothing restarts the operator on a converged
// Database and wakes every controller: the new operator has made no apply
// yet, and reads what its last ones were off the children (their
// applied.dbkeeper.io annotation) and the status, so it writes nothing.
func TestRestartedOperatorWritesNothing(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t, ns, "*")
	db := convergeReady(t, newDatabase(ns, "restarted"))
	op.WaitQuiet(t, quiet, timeout)
	op.Stop()
	versions := childVersions(t, db)
	counts := reconcileCounts(t)

	op = startOperator(t, ns, "*")
	annotate(t, db, "example.com/poke", "1")
	annotated := getDatabase(t, db).ResourceVersion
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		now := reconcileCounts(t)
		for _, name := range []string{"statefulset", "service", "secret", "backup", "tls", "replication", "cleanup", "readiness"} {
			assert.Greater(c, now[name], counts[name], "controller %s has not reconciled since the restart", name)
		}
	}, timeout, tick)
	op.WaitQuiet(t, quiet, timeout)

	assert.Empty(t, op.Writes.Since(0), "writes of the restarted operator")
	assert.Equal(t, versions, childVersions(t, db), "children's resourceVersions")
	assert.Equal(t, annotated, getDatabase(t, db).ResourceVersion, "the Database's resourceVersion moved after the annotation")
}

// childVersions maps each child to its resourceVersion.
func childVersions(t *testing.T, db *dbv1.Database) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, kind := range dbtest.ChildKinds() {
		objs, err := kind.List(context.Background(), admin, db.Namespace, client.MatchingLabels{resources.LabelInstance: db.Name})
		require.NoError(t, err)
		for _, o := range objs {
			out[kind.Kind+"/"+o.GetName()] = o.GetResourceVersion()
		}
	}
	require.Len(t, out, 12, "children: %v", out)
	return out
}

// TestDriftIsCorrected deletes and edits children and checks that the
// operator puts them back, while fields other managers own are kept.
func TestDriftIsCorrected(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t, ns, "*")
	db := convergeReady(t, newDatabase(ns, "drift"))
	ctx := context.Background()

	// A deleted child comes back.
	svc := &corev1.Service{}
	key := client.ObjectKey{Namespace: ns, Name: "drift"}
	require.NoError(t, admin.Get(ctx, key, svc))
	oldUID := svc.UID
	require.NoError(t, admin.Delete(ctx, svc))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &corev1.Service{}
		if assert.NoError(c, admin.Get(ctx, key, got)) {
			assert.NotEqual(c, oldUID, got.UID)
		}
	}, timeout, tick)

	// A foreign edit of an owned field is undone; a field another tool
	// added is kept, and the two do not fight.
	cron := &batchv1.CronJob{}
	cronKey := client.ObjectKey{Namespace: ns, Name: "drift-backup"}
	require.NoError(t, admin.Get(ctx, cronKey, cron))
	want := cron.Spec.Schedule
	patch := client.MergeFrom(cron.DeepCopy())
	cron.Spec.Schedule = "*/5 * * * *"
	cron.Annotations = map[string]string{"example.com/owner": "team-a"}
	require.NoError(t, admin.Patch(ctx, cron, patch, client.FieldOwner("kubectl-edit")))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &batchv1.CronJob{}
		if assert.NoError(c, admin.Get(ctx, cronKey, got)) {
			assert.Equal(c, want, got.Spec.Schedule)
			assert.Equal(c, "team-a", got.Annotations["example.com/owner"])
		}
	}, timeout, tick)

	sts := &appsv1.StatefulSet{}
	stsKey := client.ObjectKey{Namespace: ns, Name: "drift"}
	require.NoError(t, admin.Get(ctx, stsKey, sts))
	wantImage := sts.Spec.Template.Spec.Containers[0].Image
	patch = client.MergeFrom(sts.DeepCopy())
	sts.Spec.Template.Spec.Containers[0].Image = "postgres:13"
	sts.Spec.Replicas = ptr.To[int32](5)
	require.NoError(t, admin.Patch(ctx, sts, patch, client.FieldOwner("kubectl-edit")))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &appsv1.StatefulSet{}
		if assert.NoError(c, admin.Get(ctx, stsKey, got)) {
			assert.Equal(c, wantImage, got.Spec.Template.Spec.Containers[0].Image)
			assert.Equal(c, int32(1), *got.Spec.Replicas)
		}
	}, timeout, tick)

	// The client Service's port.
	require.NoError(t, admin.Get(ctx, key, svc))
	wantPort := svc.Spec.Ports[0].Port
	patch = client.MergeFrom(svc.DeepCopy())
	svc.Spec.Ports[0].Port = 15432
	svc.Annotations = map[string]string{"example.com/dns": "orders.example.com"}
	require.NoError(t, admin.Patch(ctx, svc, patch, client.FieldOwner("kubectl-edit")))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &corev1.Service{}
		if assert.NoError(c, admin.Get(ctx, key, got)) && assert.Len(c, got.Spec.Ports, 1) {
			assert.Equal(c, wantPort, got.Spec.Ports[0].Port)
			assert.Equal(c, "orders.example.com", got.Annotations["example.com/dns"])
		}
	}, timeout, tick)

	// The generated Secret's derived keys come back, computed from its own
	// password, which is never touched; a key another tool added is kept.
	secKey := client.ObjectKey{Namespace: ns, Name: resources.GeneratedSecretName(db)}
	sec := &corev1.Secret{}
	require.NoError(t, admin.Get(ctx, secKey, sec))
	wantData := maps.Clone(sec.Data)
	patch = client.MergeFrom(sec.DeepCopy())
	sec.Data[resources.HostKey] = []byte("evil.example.com")
	delete(sec.Data, resources.URIKey)
	sec.Data["jdbc"] = []byte("added by another tool")
	require.NoError(t, admin.Patch(ctx, sec, patch, client.FieldOwner("kubectl-edit")))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &corev1.Secret{}
		if assert.NoError(c, admin.Get(ctx, secKey, got)) {
			assert.Equal(c, "added by another tool", string(got.Data["jdbc"]))
			delete(got.Data, "jdbc")
			assert.Equal(c, wantData, got.Data)
		}
	}, timeout, tick)

	// A lost password cannot be restored, and is not regenerated: the
	// condition says so until it is put back.
	require.NoError(t, admin.Get(ctx, secKey, sec))
	patch = client.MergeFrom(sec.DeepCopy())
	delete(sec.Data, "password")
	require.NoError(t, admin.Patch(ctx, sec, patch))
	cond := waitCondition(t, db, dbv1.ConditionCredentialsReady, metav1.ConditionFalse, dbv1.ReasonSecretInvalid)
	assert.Contains(t, cond.Message, "lost its password key")
	require.NoError(t, admin.Get(ctx, secKey, sec))
	assert.Empty(t, sec.Data["password"], "dbkeeper wrote a password into a Secret that lost its own")
	patch = client.MergeFrom(sec.DeepCopy())
	sec.Data["password"] = wantData["password"]
	require.NoError(t, admin.Patch(ctx, sec, patch))
	waitCondition(t, db, dbv1.ConditionCredentialsReady, metav1.ConditionTrue, dbv1.ReasonSecretGenerated)

	markStatefulSetReady(t, db)
	waitCondition(t, db, dbv1.ConditionReady, metav1.ConditionTrue, dbv1.ReasonReady)
	op.WaitQuiet(t, quiet, timeout)
}

// TestDisabledControllerIsReportedAndCreatesNothing runs the manager with
// the backup controller switched off.
func TestDisabledControllerIsReportedAndCreatesNothing(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, ns, "*,-backup")
	db := createDatabase(t, newDatabase(ns, "nobackup"))

	cond := waitCondition(t, db, dbv1.ConditionBackupReady, metav1.ConditionUnknown, dbv1.ReasonControllerDisabled)
	assert.Contains(t, cond.Message, "--controllers")
	markStatefulSetReady(t, db)
	waitCondition(t, db, dbv1.ConditionReady, metav1.ConditionTrue, dbv1.ReasonReady)

	ctx := context.Background()
	assert.True(t, apierrors.IsNotFound(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "nobackup-backup"}, &batchv1.CronJob{})), "CronJob created by a disabled controller")
	assert.True(t, apierrors.IsNotFound(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "nobackup-backup"}, &corev1.PersistentVolumeClaim{})), "backup PVC created by a disabled controller")
}

// TestPausedLeavesChildrenAlone pauses a converged Database, deletes a
// child, and checks nothing is restored until it is unpaused.
func TestPausedLeavesChildrenAlone(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, ns, "*")
	db := convergeReady(t, newDatabase(ns, "paused"))
	ctx := context.Background()

	patchDatabase(t, db, func(d *dbv1.Database) { d.Spec.Paused = true })
	for _, condType := range []string{dbv1.ConditionStatefulSetReady, dbv1.ConditionServiceReady, dbv1.ConditionCredentialsReady, dbv1.ConditionBackupReady} {
		waitCondition(t, db, condType, metav1.ConditionUnknown, dbv1.ReasonPaused)
	}
	waitCondition(t, db, dbv1.ConditionReady, metav1.ConditionUnknown, dbv1.ReasonPaused)
	assert.Equal(t, dbv1.PhasePaused, getDatabase(t, db).Status.Phase)

	key := client.ObjectKey{Namespace: ns, Name: "paused"}
	require.NoError(t, admin.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "paused"}}))
	assert.Never(t, func() bool { return admin.Get(ctx, key, &corev1.Service{}) == nil }, quiet, tick, "a paused Database's Service was restored")

	patchDatabase(t, db, func(d *dbv1.Database) { d.Spec.Paused = false })
	require.Eventually(t, func() bool { return admin.Get(ctx, key, &corev1.Service{}) == nil }, timeout, tick, "Service not restored after unpausing")
	waitCondition(t, db, dbv1.ConditionReady, metav1.ConditionTrue, dbv1.ReasonReady)
}

// TestNoHotLoop: once converged, no controller reconciles again without an
// event (the backup controller's staleness requeue is a day away).
func TestNoHotLoop(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t, ns, "*")
	convergeReady(t, newDatabase(ns, "calm"))
	op.WaitQuiet(t, quiet, timeout)
	time.Sleep(time.Second) // let the last reconciles of the convergence finish
	before := reconcileCounts(t)
	time.Sleep(5 * time.Second)
	after := reconcileCounts(t)
	for name, n := range after {
		if name == "replication" {
			// It polls the agents every 15 s when all is steady.
			assert.LessOrEqual(t, n-before[name], float64(1), "controller %s reconciled %v times while idle", name, n-before[name])
			continue
		}
		assert.Equal(t, before[name], n, "controller %s reconciled %v times while idle", name, n-before[name])
	}
}
