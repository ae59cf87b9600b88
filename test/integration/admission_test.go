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
