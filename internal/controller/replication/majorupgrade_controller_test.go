package replication

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// errKilled is what a killed manager's writes get.
var errKilled = errors.New("the manager was killed")

// killingClient is f.c refusing every write after the first left (a
// manager killed right after its left-th write: nothing later reaches the
// API server).
func killingClient(f *fixture, left *atomic.Int64) client.Client {
	write := func() error {
		if left.Add(-1) < 0 {
			return errKilled
		}
		return nil
	}
	return interceptor.NewClient(f.c.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := write(); err != nil {
				return err
			}
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := write(); err != nil {
				return err
			}
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if err := write(); err != nil {
				return err
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			if err := write(); err != nil {
				return err
			}
			return c.Apply(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if err := write(); err != nil {
				return err
			}
			return c.Delete(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if err := write(); err != nil {
				return err
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if err := write(); err != nil {
				return err
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			if err := write(); err != nil {
				return err
			}
			return c.SubResource(sub).Apply(ctx, obj, opts...)
		},
	})
}

// raiseMajor plays the statefulset controller after spec.version went
// from 17 to 18: the template of revision r2 carries the upgrade, and
// the agents of its pods upgrade (agentstest.SetMajorUpgrade).
func raiseMajor(t *testing.T, f *fixture, failure string) {
	ctx := context.Background()
	f.agents.SetMajorUpgrade(f.db, "17", "18", "r2", failure)
	sts := &appsv1.StatefulSet{}
	require.NoError(t, f.c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders"}, sts))
	sts.Annotations = map[string]string{resources.AnnotationEngineVersion: "18", resources.AnnotationUpgradeFrom: "17"}
	require.NoError(t, f.c.Update(ctx, sts))
	sts.Status.UpdateRevision = "r2"
	require.NoError(t, f.c.Status().Update(ctx, sts))
	f.revision = "r2"
}

// stepKilled is one reconcile of a new manager whose writes stop after
// left.
func (f *fixture) stepKilled(left *atomic.Int64) error {
	kc := killingClient(f, left)
	s := &syncer{client: &deleteRecorder{Client: kc, f: f}, reader: f.c, writer: facet.WriterFor(kc, f.events, Name),
		agents: f.agents, instances: f.servers, now: f.syncer().now}
	r := facet.NewReconciler(kc, s.writer, dbv1.ConditionReplicationReady, s, facet.Options{})
	_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.db)})
	f.pods()
	return err
}

// TestMajorUpgradeKilledAfterAnyWrite: the manager killed right after
// each of its writes of an in-place major upgrade of three instances (as
// the deletion tests kill it), and a new one started: it always ends with
// the upgrade Succeeded, the same primary on 18, every standby cloned
// again and streaming, no failover and no promotion on the way; and a
// failing upgrade killed anywhere always ends Failed with every instance
// serving 17.
func TestMajorUpgradeKilledAfterAnyWrite(t *testing.T) {
	run := func(t *testing.T, failure string, kill int64) (*fixture, int) {
		f, _ := converged(t, 3)
		raiseMajor(t, f, failure)
		before := len(f.agents.Calls())
		var left atomic.Int64
		left.Store(kill)
		writes := 0
		for i := 0; i < 40; i++ {
			n := left.Load()
			err := f.stepKilled(&left)
			if err != nil {
				require.ErrorIs(t, err, errKilled)
				left.Store(1 << 30) // the next manager is not killed
			} else {
				writes += int(n - left.Load())
			}
		}
		for _, c := range f.agents.Calls()[before:] {
			assert.NotContains(t, c, "promote", "no promotion during the upgrade (kill after write %d)", kill)
		}
		assert.Equal(t, "orders-0", f.get().Status.Replication.CurrentPrimary, "no failover (kill after write %d)", kill)
		return f, writes
	}
	// calibration: the writes of an uninterrupted upgrade
	f, n := run(t, "", 1<<30)
	require.Equal(t, dbv1.MajorUpgradeSucceeded, f.get().Status.Replication.MajorUpgrade.Phase)
	require.Positive(t, n)
	n = min(n, 25)
	t.Logf("an uninterrupted upgrade of three instances makes %d writes", n)
	for k := range n {
		t.Run(fmt.Sprintf("killed-after-write-%d", k+1), func(t *testing.T) {
			f, _ := run(t, "", int64(k+1))
			db := f.get()
			mu := db.Status.Replication.MajorUpgrade
			require.NotNil(t, mu)
			assert.Equal(t, dbv1.MajorUpgradeSucceeded, mu.Phase, mu.Message)
			assert.Equal(t, map[string]string{"orders-0": "18", "orders-1": "18", "orders-2": "18"}, f.agents.DataVersions(f.db))
			assert.Equal(t, dbv1.ReasonReplicating, f.condition().Reason, f.condition().Message)
			assert.Contains(t, db.Status.Replication.SystemID, "-18", "the upgraded cluster's system identifier")
		})
		t.Run(fmt.Sprintf("failing-killed-after-write-%d", k+1), func(t *testing.T) {
			f, _ := run(t, "pg_upgrade's checks refused the upgrade: reg* data types", int64(k+1))
			db := f.get()
			mu := db.Status.Replication.MajorUpgrade
			require.NotNil(t, mu)
			assert.Equal(t, dbv1.MajorUpgradeFailed, mu.Phase, mu.Message)
			assert.Equal(t, map[string]string{"orders-0": "17", "orders-1": "17", "orders-2": "17"}, f.agents.DataVersions(f.db))
			assert.Equal(t, dbv1.ReasonMajorUpgradeFailed, f.condition().Reason, f.condition().Message)
		})
	}
}
