package facet

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
)

// stubSyncer returns err, or a True condition; it counts its syncs.
type stubSyncer struct {
	err   error
	syncs int
}

func (s *stubSyncer) Sync(context.Context, *dbv1.Database) (Outcome, error) {
	s.syncs++
	if s.err != nil {
		return Outcome{}, s.err
	}
	return Outcome{Condition: conditions.True("", dbv1.ReasonServicesReady, "in place")}, nil
}

func (s *stubSyncer) CurrentStatus(*dbv1.Database) *dbv1ac.DatabaseStatusApplyConfiguration {
	return nil
}

// TestReconciler: the loop every facet shares. It syncs and reports the
// facet's condition; reports Paused without syncing; reports a sync error
// as ApplyFailed, returning it unless it is terminal; reports an object
// that is not the Database's as NameTaken and looks again later without
// an error's back-off; and waits for the cleanup finalizer when told to.
func TestReconciler(t *testing.T) {
	cases := []struct {
		name      string
		paused    bool
		noFinal   bool
		err       error
		syncs     int
		reason    string // "" when nothing is written
		returnErr bool
		requeue   time.Duration
	}{
		{name: "synced", syncs: 1, reason: dbv1.ReasonServicesReady},
		{name: "paused", paused: true, reason: dbv1.ReasonPaused},
		{name: "failed", err: errors.New("connection refused"), syncs: 1, reason: dbv1.ReasonApplyFailed, returnErr: true},
		{name: "terminal", err: reconcile.TerminalError(errors.New("no image")), syncs: 1, reason: dbv1.ReasonApplyFailed},
		{name: "name taken", err: fmt.Errorf("applying Service: %w", &NotOursError{Kind: "Service", Name: "orders", Why: "it is another team's"}),
			syncs: 1, reason: dbv1.ReasonNameTaken, requeue: nameTakenRecheck},
		{name: "waits for the finalizer", noFinal: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := facettest.Database()
			db.Spec.Paused = tc.paused
			if tc.noFinal {
				db.Finalizers = nil
			}
			c := facettest.Client(t, db)
			s := &stubSyncer{err: tc.err}
			r := NewReconciler(c, WriterFor(c, &events.FakeRecorder{}, "service"), dbv1.ConditionServiceReady, s, Options{WaitForFinalizer: true})
			res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)})
			assert.Equal(t, tc.returnErr, err != nil, "error %v", err)
			assert.Equal(t, tc.requeue, res.RequeueAfter)
			assert.Equal(t, tc.syncs, s.syncs)

			got := &dbv1.Database{}
			require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(db), got))
			cond := meta.FindStatusCondition(got.Status.Conditions, dbv1.ConditionServiceReady)
			if tc.reason == "" {
				assert.Nil(t, cond)
				return
			}
			require.NotNil(t, cond)
			assert.Equal(t, tc.reason, cond.Reason, cond.Message)
			assert.Equal(t, db.Generation, cond.ObservedGeneration)
			if tc.err != nil {
				assert.Equal(t, metav1.ConditionFalse, cond.Status)
				assert.Equal(t, tc.err.Error(), cond.Message)
			}
		})
	}
}
