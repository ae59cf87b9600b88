package cleanup

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// releaser removes the finalizer when the cleanup controller is disabled.
type releaser struct {
	client client.Client
}

// newReleaser is the releaser that patches with c.
func newReleaser(c client.Client) *releaser { return &releaser{client: c} }

// Reconcile implements reconcile.Reconciler.
func (r *releaser) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	db := &dbv1.Database{}
	if err := r.client.Get(ctx, req.NamespacedName, db); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := db.DeepCopy()
	if !controllerutil.RemoveFinalizer(db, dbv1.Finalizer) {
		return ctrl.Result{}, nil
	}
	log.FromContext(ctx).Info("Removing finalizer: the cleanup controller is disabled")
	if err := r.client.Patch(ctx, db, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("removing finalizer: %w", err))
	}
	return ctrl.Result{}, nil
}
