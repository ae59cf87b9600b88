package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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

// TestStoredReplicasAboveOneRunsOne: a Database stored with replicas: 3
// before the CRD refused it runs a single instance and says so, with a
// Warning Event, instead of three servers splitting the data.
func TestStoredReplicasAboveOneRunsOne(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	createWithoutReplicasRule(t, newDatabase(ns, "legacy", func(d *dbv1.Database) { d.Spec.Replicas = ptr.To[int32](3) }))
	startOperator(t, ns, "*")
	db := newDatabase(ns, "legacy")
	sts := &appsv1.StatefulSet{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.StatefulSetName(db)}, sts))
	}, timeout, tick)
	assert.Equal(t, int32(1), *sts.Spec.Replicas, "a Database stored with replicas: 3 runs more than one instance")
	markStatefulSetReady(t, db)
	cond := waitCondition(t, db, dbv1.ConditionStatefulSetReady, metav1.ConditionTrue, dbv1.ReasonReplicasCapped)
	assert.Contains(t, cond.Message, "spec.replicas is 3")
	assert.Equal(t, int32(3), *getDatabase(t, db).Spec.Replicas, "dbkeeper changed the user's spec")
}

// createWithoutReplicasRule creates db while the CRD lacks the rule capping
// spec.replicas, as a CRD from before that rule did, then puts it back.
func createWithoutReplicasRule(t *testing.T, db *dbv1.Database) {
	t.Helper()
	ctx := context.Background()
	scheme := runtime.NewScheme()
	require.NoError(t, apiextensionsv1.AddToScheme(scheme))
	crds, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	key := client.ObjectKey{Name: "databases.database.dbkeeper.io"}
	setRules := func(rules apiextensionsv1.ValidationRules) {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			require.NoError(c, crds.Get(ctx, key, crd))
			spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
			r := spec.Properties["replicas"]
			r.XValidations = rules
			spec.Properties["replicas"] = r
			crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
			assert.NoError(c, crds.Update(ctx, crd))
		}, timeout, tick)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	require.NoError(t, crds.Get(ctx, key, crd))
	original := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["replicas"].XValidations
	require.NotEmpty(t, original, "the replicas rule moved; update this test")
	setRules(nil)
	defer setRules(original)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, admin.Create(ctx, db.DeepCopy()))
	}, timeout, tick, "the loosened CRD never accepted replicas: 3")
}
