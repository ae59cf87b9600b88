package validation_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// TestSpreadListUnderServerSideApply: spec.topologySpreadConstraints
// unset (the default spread) and [] (no spread) stay apart when field
// managers apply the Database, as the field's documentation says. The list
// is atomic: one manager owns it whole, [] included, so [] survives other
// managers' applies, and the manager that stops applying it removes it,
// which brings the default back. (As a map list keyed like a pod's, an
// applied [] would be owned by nobody and stay behind for good: found
// here, and the reason the list is atomic.)
func TestSpreadListUnderServerSideApply(t *testing.T) {
	ctx, ns := setup(t)
	const name = "spread"
	apply := func(manager string, spec *dbv1ac.DatabaseSpecApplyConfiguration) {
		t.Helper()
		ac := dbv1ac.Database(name, ns)
		if spec != nil {
			ac.WithSpec(spec)
		}
		require.NoError(t, k8s.Apply(ctx, ac, client.FieldOwner(manager)), "apply by %s", manager)
	}
	spread := func() *[]corev1.TopologySpreadConstraint {
		t.Helper()
		var db dbv1.Database
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &db))
		return db.Spec.TopologySpreadConstraints
	}
	zone := corev1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule}
	rack := corev1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "example.com/rack", WhenUnsatisfiable: corev1.ScheduleAnyway}

	apply("app", dbv1ac.DatabaseSpec().WithReplicas(3))
	assert.Nil(t, spread(), "never set: unset, the default spread")

	apply("platform", dbv1ac.DatabaseSpec().WithTopologySpreadConstraints([]corev1.TopologySpreadConstraint{zone}))
	err := k8s.Apply(ctx, dbv1ac.Database(name, ns).WithSpec(dbv1ac.DatabaseSpec().WithReplicas(3).
		WithTopologySpreadConstraints([]corev1.TopologySpreadConstraint{rack})), client.FieldOwner("app"))
	assert.True(t, apierrors.IsConflict(err), "the list is one value, owned whole by the manager that applied it: want a conflict, got %v", err)
	if got := spread(); assert.NotNil(t, got) {
		assert.Equal(t, []corev1.TopologySpreadConstraint{zone}, *got)
	}

	apply("platform", nil)
	assert.Nil(t, spread(), "the manager stopped applying the list: the default is back")

	apply("platform", dbv1ac.DatabaseSpec().WithTopologySpreadConstraints([]corev1.TopologySpreadConstraint{}))
	if got := spread(); assert.NotNil(t, got, "[] is stored as []") {
		assert.Empty(t, *got)
	}
	apply("app", dbv1ac.DatabaseSpec().WithReplicas(2))
	if got := spread(); assert.NotNil(t, got, "another manager's apply keeps []") {
		assert.Empty(t, *got)
	}

	apply("platform", nil)
	assert.Nil(t, spread(), "the manager of [] stopped applying it: the default is back")
}

// TestPlacementStored: what the placement fields hold reaches the stored
// Database as sent, an explicit empty spread list included.
func TestPlacementStored(t *testing.T) {
	ctx, ns := setup(t)
	spec := map[string]any{
		"tolerations":               []any{map[string]any{"key": "dedicated", "operator": "Equal", "value": "database", "effect": "NoSchedule"}},
		"nodeSelector":              map[string]any{"node-role.example.com/database": ""},
		"priorityClassName":         "database-critical",
		"topologySpreadConstraints": []any{},
	}
	require.NoError(t, k8s.Create(ctx, rawDatabase(ns, "placed", spec)))
	var db dbv1.Database
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "placed"}, &db))
	assert.Equal(t, []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "database", Effect: corev1.TaintEffectNoSchedule}}, db.Spec.Tolerations)
	assert.Equal(t, map[string]string{"node-role.example.com/database": ""}, db.Spec.NodeSelector)
	assert.Equal(t, "database-critical", db.Spec.PriorityClassName)
	if assert.NotNil(t, db.Spec.TopologySpreadConstraints, "[] is not unset") {
		assert.Empty(t, *db.Spec.TopologySpreadConstraints)
	}
}
