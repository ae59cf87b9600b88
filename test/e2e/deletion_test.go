package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// deletionCase is one cell of the deletion matrix: a policy, the
// propagation the Database is deleted with, and whether the cleanup
// controller runs.
type deletionCase struct {
	policy      dbv1.DeletionPolicy
	propagation metav1.DeletionPropagation
	cleanupOff  bool
}

func (c deletionCase) name() string {
	n := strings.ToLower(string(c.policy)) + "-" + strings.ToLower(string(c.propagation))
	if c.cleanupOff {
		n += "-nocleanup"
	}
	return n
}

// keeps reports what the user guide's table (docs/user-guide/deletion.md) says survives: the data PVCs, the
// generated Secret, the backup PVC. With cleanup off nothing data-bearing
// is ever deleted.
func (c deletionCase) keeps() (data, secret, backup bool) {
	if c.cleanupOff {
		return true, true, true
	}
	switch c.policy {
	case dbv1.DeletionPolicyRetain:
		return true, true, true
	case dbv1.DeletionPolicyWipeOut:
		return false, false, false
	}
	return false, false, true
}

// workloadStays reports whether the StatefulSet may still run afterwards:
// only when orphan propagation asked for it and nothing it runs on was
// deleted.
func (c deletionCase) workloadStays() bool {
	data, _, _ := c.keeps()
	return c.propagation == metav1.DeletePropagationOrphan && data
}

// TestDeletionMatrix deletes a Database under every policy with every
// propagation (background; foreground, as Argo CD prunes; orphan), and with
// the cleanup controller switched off, and checks that exactly the user guide's
// table holds: what the policy keeps is there with its data (same UID, same
// password, no owner reference to the Database), what it deletes is gone,
// and nothing keeps running on a deleted volume. A PVC that only copies the
// labels of a data PVC is never deleted.
func TestDeletionMatrix(t *testing.T) {
	var cases []deletionCase
	propagations := []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan}
	for _, p := range []dbv1.DeletionPolicy{dbv1.DeletionPolicyDelete, dbv1.DeletionPolicyRetain, dbv1.DeletionPolicyWipeOut} {
		for _, prop := range propagations {
			cases = append(cases, deletionCase{policy: p, propagation: prop})
		}
	}
	for _, p := range []dbv1.DeletionPolicy{dbv1.DeletionPolicyDelete, dbv1.DeletionPolicyRetain, dbv1.DeletionPolicyWipeOut} {
		for _, prop := range propagations {
			cases = append(cases, deletionCase{policy: p, propagation: prop, cleanupOff: true})
		}
	}
	withCleanup, withoutCleanup := newNamespace(t), newNamespace(t)
	startOperator(t, withCleanup)
	startOperatorWith(t, withoutCleanup, "*,-cleanup")
	t.Run("cases", func(t *testing.T) {
		for _, tc := range cases {
			ns := withCleanup
			if tc.cleanupOff {
				ns = withoutCleanup
			}
			t.Run(tc.name(), func(t *testing.T) {
				t.Parallel()
				testDeletion(t, ns, tc)
			})
		}
	})
}

func testDeletion(t *testing.T, ns string, tc deletionCase) {
	ctx := context.Background()
	db := newDatabase(ns, tc.name(), func(d *dbv1.Database) {
		d.Spec.DeletionPolicy = tc.policy
		d.Spec.Backup.Schedule = "0 0 1 1 *"
	})
	require.NoError(t, k8s.Create(ctx, db))
	live := waitReady(t, db)

	key := func(name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }
	secret := &corev1.Secret{}
	require.NoError(t, k8s.Get(ctx, key(resources.GeneratedSecretName(db)), secret))
	pvcs := map[string]*corev1.PersistentVolumeClaim{}
	dataName := fmt.Sprintf("data-%s-0", resources.StatefulSetName(db))
	for _, n := range []string{dataName, resources.BackupName(db)} {
		pvc := &corev1.PersistentVolumeClaim{}
		require.NoError(t, k8s.Get(ctx, key(n), pvc))
		pvcs[n] = pvc
	}
	// A copy of the data PVC's labels on a PVC dbkeeper never made
	// (kubectl get -o yaml, edited): no policy may delete it.
	copied := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: db.Name + "-copy", Labels: pvcs[dataName].Labels},
		Spec:       *pvcs[dataName].Spec.DeepCopy(),
	}
	copied.Spec.VolumeName = ""
	require.NoError(t, k8s.Create(ctx, copied))

	require.NoError(t, k8s.Delete(ctx, live, client.PropagationPolicy(tc.propagation)))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(db), &dbv1.Database{}))
	},
		timeout, tick, "the Database was not released")

	keepData, keepSecret, keepBackup := tc.keeps()
	type expect struct {
		obj  client.Object
		uid  types.UID
		keep bool
	}
	expected := []expect{
		{&corev1.PersistentVolumeClaim{}, pvcs[dataName].UID, keepData},
		{&corev1.Secret{}, secret.UID, keepSecret},
		{&corev1.PersistentVolumeClaim{}, pvcs[resources.BackupName(db)].UID, keepBackup},
		{&corev1.PersistentVolumeClaim{}, copied.UID, true},
	}
	names := []string{dataName, secret.Name, resources.BackupName(db), copied.Name}
	for i := range expected {
		expected[i].obj.SetNamespace(ns)
		expected[i].obj.SetName(names[i])
	}
	workload := []client.Object{
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: resources.StatefulSetName(db)}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: resources.ClientServiceName(db)}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: resources.HeadlessServiceName(db)}},
		&batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: resources.BackupName(db)}},
	}

	// What goes must go: NotFound in the end (the PVC protection finalizer
	// holds a deleted claim only while a pod still uses it).
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, e := range expected {
			if !e.keep {
				obj := e.obj.DeepCopyObject().(client.Object)
				err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)
				assert.True(c, apierrors.IsNotFound(err), "%T %s still there, policy %s deletes it (err %v, deletionTimestamp %v)",
					obj, obj.GetName(), tc.policy, err, obj.GetDeletionTimestamp())
			}
		}
		if !tc.workloadStays() {
			for _, w := range workload {
				obj := w.DeepCopyObject().(client.Object)
				err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)
				assert.True(c, apierrors.IsNotFound(err), "%T %s still there (err %v)", obj, obj.GetName(), err)
			}
			pods := &corev1.PodList{}
			require.NoError(c, k8s.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(resources.PodSelectorLabels(db))))
			var running []string
			for _, pod := range pods.Items {
				running = append(running, pod.Name)
			}
			assert.Empty(c, running, "pods of %s still there", db.Name)
		}
	}, timeout, tick)

	// What stays must stay, with its data, and garbage collection must not
	// be able to take it: give the collector time to act.
	check := func(c assert.TestingT) {
		for _, e := range expected {
			if !e.keep {
				continue
			}
			obj := e.obj.DeepCopyObject().(client.Object)
			if !assert.NoError(c, k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj), "%T %s lost, policy %s keeps it", obj, obj.GetName(), tc.policy) {
				continue
			}
			assert.Equal(c, e.uid, obj.GetUID(), "%T %s was replaced", obj, obj.GetName())
			assert.Nil(c, obj.GetDeletionTimestamp(), "%T %s is being deleted", obj, obj.GetName())
			for _, ref := range obj.GetOwnerReferences() {
				assert.NotEqual(c, live.UID, ref.UID, "%T %s kept with an owner reference to the Database", obj, obj.GetName())
			}
			if s, ok := obj.(*corev1.Secret); ok {
				assert.Equal(c, string(secret.Data["password"]), string(s.Data["password"]), "the kept Secret's password changed")
			}
		}
		if tc.workloadStays() {
			sts := &appsv1.StatefulSet{}
			if assert.NoError(c, k8s.Get(ctx, key(resources.StatefulSetName(db)), sts), "orphan propagation: the StatefulSet went") {
				assert.Nil(c, sts.DeletionTimestamp, "orphan propagation: the StatefulSet is being deleted")
			}
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		check(t)
		if t.Failed() {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}
