package integration

import (
	"context"
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestServiceAnnotationsFollowTheSpec removes annotations from
// spec.service.annotations, one and then all, and checks that the client
// Service loses them, while an annotation another tool set is kept. A
// removed key is a field dbkeeper stops applying, which live still has and
// desired no longer mentions: "live holds every field of desired" stays
// true, so only an apply of the changed desired (after which server-side
// apply removes what dbkeeper no longer owns) takes it away.
func TestServiceAnnotationsFollowTheSpec(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t, ns, "*")
	db := convergeReady(t, newDatabase(ns, "annotated", func(d *dbv1.Database) {
		d.Spec.Service.Annotations = map[string]string{"example.com/keep": "1", "example.com/drop": "2"}
	}))
	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: resources.ClientServiceName(db)}
	// The Service's annotations but dbkeeper's record of its last apply.
	annotations := func(c require.TestingT) map[string]string {
		svc := &corev1.Service{}
		require.NoError(c, admin.Get(ctx, key, svc))
		maps.DeleteFunc(svc.Annotations, func(k, _ string) bool { return strings.HasPrefix(k, apply.AppliedAnnotationPrefix) })
		return svc.Annotations
	}
	assert.Equal(t, map[string]string{"example.com/keep": "1", "example.com/drop": "2"}, annotations(t))

	svc := &corev1.Service{}
	require.NoError(t, admin.Get(ctx, key, svc))
	patch := client.MergeFrom(svc.DeepCopy())
	svc.Annotations["example.com/other-tool"] = "x"
	require.NoError(t, admin.Patch(ctx, svc, patch, client.FieldOwner("other-tool")))

	patchDatabase(t, db, func(d *dbv1.Database) { delete(d.Spec.Service.Annotations, "example.com/drop") })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, map[string]string{"example.com/keep": "1", "example.com/other-tool": "x"}, annotations(c))
	}, timeout, tick, "the annotation removed from spec.service.annotations is still on the Service")

	patchDatabase(t, db, func(d *dbv1.Database) { d.Spec.Service.Annotations = nil })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, map[string]string{"example.com/other-tool": "x"}, annotations(c))
	}, timeout, tick, "the annotations removed from spec.service.annotations are still on the Service")
	waitCondition(t, db, dbv1.ConditionServiceReady, metav1.ConditionTrue, dbv1.ReasonServicesReady)
	op.WaitQuiet(t, quiet, timeout)

	// The same while the operator is down: a restarted operator knows
	// nothing of its last apply but what the Service says of it.
	op.Stop()
	patchDatabase(t, db, func(d *dbv1.Database) { d.Spec.Service.Annotations = map[string]string{"example.com/late": "1"} })
	op = startOperator(t, ns, "*")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, map[string]string{"example.com/late": "1", "example.com/other-tool": "x"}, annotations(c))
	}, timeout, tick)
	op.WaitQuiet(t, quiet, timeout)
	op.Stop()
	patchDatabase(t, db, func(d *dbv1.Database) { d.Spec.Service.Annotations = nil })
	startOperator(t, ns, "*")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, map[string]string{"example.com/other-tool": "x"}, annotations(c))
	}, timeout, tick, "the annotation removed while the operator was down is still on the Service")
}

// TestClientServiceOpensAfterTheRestore checks that the client Service's
// selector loses its restore-pending key once status.backup.restoredFrom
// says spec.bootstrap's restore finished: the selector is atomic, and the
// key is one dbkeeper stops applying. Only the service controller runs, so
// the test writes restoredFrom itself, as the backup controller would.
func TestClientServiceOpensAfterTheRestore(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t, ns, "service")
	db := createDatabase(t, newDatabase(ns, "restored", func(d *dbv1.Database) {
		d.Spec.Bootstrap = &dbv1.BootstrapSpec{FromBackup: &dbv1.BootstrapFromBackup{Database: "source"}}
	}))
	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: resources.ClientServiceName(db)}
	selector := func(c require.TestingT) map[string]string {
		svc := &corev1.Service{}
		require.NoError(c, admin.Get(ctx, key, svc))
		return svc.Spec.Selector
	}
	waitCondition(t, db, dbv1.ConditionServiceReady, metav1.ConditionTrue, dbv1.ReasonWaitingForRestore)
	assert.Equal(t, "true", selector(t)[resources.LabelRestorePending])

	live := getDatabase(t, db)
	patch := client.MergeFrom(live.DeepCopy())
	live.Status.Backup = &dbv1.BackupStatus{RestoredFrom: "source/latest"}
	require.NoError(t, admin.Status().Patch(ctx, live, patch, client.FieldOwner("test")))

	waitCondition(t, db, dbv1.ConditionServiceReady, metav1.ConditionTrue, dbv1.ReasonServicesReady)
	want := resources.PodSelectorLabels(db)
	want[dbv1.LabelRole] = dbv1.RolePrimary
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, want, selector(c))
	}, timeout, tick, "the client Service still selects no pod after the restore finished")
	op.WaitQuiet(t, quiet, timeout)
}
