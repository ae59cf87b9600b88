package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestRefusedChildNamesTheField: a schedule that CEL lets through but the
// CronJob API refuses (a range written backwards) is reported as
// ApplyFailed naming spec.backup.schedule, and not retried in a loop.
func TestRefusedChildNamesTheField(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, ns, "*")
	db := createDatabase(t, newDatabase(ns, "backwards", func(d *dbv1.Database) { d.Spec.Backup.Schedule = "0 5-3 * * *" }))
	cond := waitCondition(t, db, dbv1.ConditionBackupReady, metav1.ConditionFalse, dbv1.ReasonApplyFailed)
	assert.Contains(t, cond.Message, "spec.schedule")
	assert.Contains(t, cond.Message, "; fix spec.backup.schedule")

	time.Sleep(time.Second)
	before := reconcileErrors(t)["backup"]
	time.Sleep(3 * time.Second)
	assert.Equal(t, before, reconcileErrors(t)["backup"], "a refused CronJob is retried without a change to the Database")

	// Fixing the field heals it.
	db = getDatabase(t, db)
	db.Spec.Backup.Schedule = "0 3-5 * * *"
	require.NoError(t, admin.Update(context.Background(), db))
	waitCondition(t, db, dbv1.ConditionBackupReady, metav1.ConditionTrue, dbv1.ReasonBackupScheduled)
}

// TestRefusedPlacementNamesTheField: placement that admission lets through
// but the StatefulSet API would refuse is reported as StatefulSetReady
// ApplyFailed naming the Database's field, and not retried in a loop: a
// toleration key that is no label key (the apiserver's own refusal, with
// "fix spec.tolerations" added), and two spread constraints of one
// topologyKey and whenUnsatisfiable (which the apiserver would refuse
// naming no field, so the builder refuses them first).
func TestRefusedPlacementNamesTheField(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, ns, "*")
	tolerating := createDatabase(t, newDatabase(ns, "tolerating", func(d *dbv1.Database) {
		d.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated db", Operator: corev1.TolerationOpExists}}
	}))
	zone := corev1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule}
	spreading := createDatabase(t, newDatabase(ns, "spreading", func(d *dbv1.Database) {
		d.Spec.TopologySpreadConstraints = &[]corev1.TopologySpreadConstraint{zone, zone}
	}))

	cond := waitCondition(t, tolerating, dbv1.ConditionStatefulSetReady, metav1.ConditionFalse, dbv1.ReasonApplyFailed)
	assert.Contains(t, cond.Message, "spec.template.spec.tolerations[0].key")
	assert.Contains(t, cond.Message, "; fix spec.tolerations")
	cond = waitCondition(t, spreading, dbv1.ConditionStatefulSetReady, metav1.ConditionFalse, dbv1.ReasonApplyFailed)
	assert.Contains(t, cond.Message, `spec.topologySpreadConstraints: two constraints have topologyKey "topology.kubernetes.io/zone" and whenUnsatisfiable DoNotSchedule`)

	time.Sleep(time.Second)
	before := reconcileErrors(t)["statefulset"]
	time.Sleep(3 * time.Second)
	assert.Equal(t, before, reconcileErrors(t)["statefulset"], "refused placement is retried without a change to the Database")

	// Fixing the field makes the StatefulSet.
	spreading = getDatabase(t, spreading)
	spreading.Spec.TopologySpreadConstraints = &[]corev1.TopologySpreadConstraint{zone}
	require.NoError(t, admin.Update(context.Background(), spreading))
	waitCondition(t, spreading, dbv1.ConditionStatefulSetReady, metav1.ConditionFalse, dbv1.ReasonProgressing)
	sts := &appsv1.StatefulSet{}
	require.NoError(t, admin.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: resources.StatefulSetName(spreading)}, sts))
	require.Len(t, sts.Spec.Template.Spec.TopologySpreadConstraints, 1)
	assert.Equal(t, corev1.LabelTopologyZone, sts.Spec.Template.Spec.TopologySpreadConstraints[0].TopologyKey)
	assert.NotNil(t, sts.Spec.Template.Spec.TopologySpreadConstraints[0].LabelSelector, "the Database's selector, filled in")
}

// TestThreeReplicas: a Database of replicas: 3 gets a StatefulSet of three
// pods that rolls out OnDelete, a PodDisruptionBudget that lets one standby
// go, a read-only Service beside the read-write one, and its replication
// Secret; scaled down to one, the budget goes.
func TestThreeReplicas(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	startOperator(t, ns, "*")
	db := createDatabase(t, newDatabase(ns, "trio", func(d *dbv1.Database) { d.Spec.Replicas = ptr.To[int32](3) }))
	sts := &appsv1.StatefulSet{}
	pdb := &policyv1.PodDisruptionBudget{}
	ro := &corev1.Service{}
	repl := &corev1.Secret{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.StatefulSetName(db)}, sts))
		assert.NoError(c, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.PodDisruptionBudgetName(db)}, pdb))
		assert.NoError(c, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.ReadOnlyServiceName(db)}, ro))
		assert.NoError(c, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.ReplicationSecretName(db)}, repl))
	}, timeout, tick)
	assert.Equal(t, int32(3), *sts.Spec.Replicas)
	assert.Equal(t, appsv1.OnDeleteStatefulSetStrategyType, sts.Spec.UpdateStrategy.Type)
	assert.Equal(t, intstr.FromInt32(1), *pdb.Spec.MinAvailable, "one of the two standbys may go")
	assert.Equal(t, dbv1.RoleReplica, ro.Spec.Selector[dbv1.LabelRole])
	assert.NotEmpty(t, repl.Data[resources.AgentTokenKey])

	patchDatabase(t, db, func(d *dbv1.Database) { d.Spec.Replicas = ptr.To[int32](1) })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := admin.Get(ctx, client.ObjectKeyFromObject(pdb), &policyv1.PodDisruptionBudget{})
		assert.True(c, apierrors.IsNotFound(err), "the budget of one instance: %v", err)
		assert.NoError(c, admin.Get(ctx, client.ObjectKeyFromObject(sts), sts))
		assert.Equal(c, int32(1), *sts.Spec.Replicas)
	}, timeout, tick)
}
