package readiness

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
)

// TestReconcileWritesTheSummary: the reconciler reads the conditions of the
// enabled facets only and writes Ready, the phase and observedGeneration
// (which moves only once every facet has observed the generation); it
// writes nothing before the cleanup finalizer when told to wait for it.
func TestReconcileWritesTheSummary(t *testing.T) {
	facets := []string{dbv1.ConditionStatefulSetReady, dbv1.ConditionServiceReady}
	cond := func(t, status, reason string, gen int64) metav1.Condition {
		return metav1.Condition{Type: t, Status: metav1.ConditionStatus(status), Reason: reason, ObservedGeneration: gen,
			LastTransitionTime: metav1.Now(), Message: t + " says " + reason}
	}
	stsReady := cond(dbv1.ConditionStatefulSetReady, "True", dbv1.ReasonStatefulSetReady, 2)
	svcReady := cond(dbv1.ConditionServiceReady, "True", dbv1.ReasonServicesReady, 2)
	cases := []struct {
		name       string
		conditions []metav1.Condition
		noFinalize bool
		wait       bool
		status     metav1.ConditionStatus // "" when nothing is written
		phase      dbv1.Phase
		observed   int64
	}{
		{name: "every facet ready", conditions: []metav1.Condition{stsReady, svcReady}, status: metav1.ConditionTrue, phase: dbv1.PhaseReady, observed: 2},
		{name: "a disabled facet's condition is not read", conditions: []metav1.Condition{
			stsReady, svcReady, cond(dbv1.ConditionBackupReady, "False", dbv1.ReasonLastBackupFailed, 2),
		}, status: metav1.ConditionTrue, phase: dbv1.PhaseReady, observed: 2},
		{name: "a facet progressing", conditions: []metav1.Condition{
			cond(dbv1.ConditionStatefulSetReady, "False", dbv1.ReasonProgressing, 2), svcReady,
		}, status: metav1.ConditionFalse, phase: dbv1.PhaseProgressing, observed: 2},
		{name: "a facet behind the generation", conditions: []metav1.Condition{
			cond(dbv1.ConditionStatefulSetReady, "True", dbv1.ReasonStatefulSetReady, 1), svcReady,
		}, status: metav1.ConditionUnknown, phase: dbv1.PhaseProgressing, observed: 1},
		{name: "a facet failed", conditions: []metav1.Condition{
			stsReady, cond(dbv1.ConditionServiceReady, "False", dbv1.ReasonApplyFailed, 2),
		}, status: metav1.ConditionFalse, phase: dbv1.PhaseDegraded, observed: 2},
		{name: "waits for the finalizer", noFinalize: true, wait: true},
		{name: "does not wait when cleanup is off", noFinalize: true, status: metav1.ConditionUnknown, phase: dbv1.PhaseProgressing, observed: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := facettest.Database()
			db.Generation = 2
			db.Status.ObservedGeneration = 1
			db.Status.Conditions = tc.conditions
			if tc.noFinalize {
				db.Finalizers = nil
			}
			c := facettest.Client(t, db)
			r := newReconciler(c, facet.WriterFor(c, &events.FakeRecorder{}, Name), facet.Options{Facets: facets, WaitForFinalizer: tc.wait})
			_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)})
			require.NoError(t, err)

			got := &dbv1.Database{}
			require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(db), got))
			ready := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionReady)
			if tc.status == "" {
				assert.Nil(t, ready, "wrote Ready before the finalizer")
				return
			}
			require.NotNil(t, ready)
			assert.Equal(t, tc.status, ready.Status, ready.Message)
			assert.Equal(t, int64(2), ready.ObservedGeneration)
			assert.Equal(t, tc.phase, got.Status.Phase)
			assert.Equal(t, tc.observed, got.Status.ObservedGeneration)
		})
	}

	t.Run("a deleted Database is no error", func(t *testing.T) {
		c := facettest.Client(t)
		r := newReconciler(c, facet.WriterFor(c, &events.FakeRecorder{}, Name), facet.Options{Facets: facets})
		_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "shop", Name: "gone"}})
		assert.NoError(t, err)
	})
}
