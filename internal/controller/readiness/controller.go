// Package readiness is the controller of a Database's summary: it derives
// the Ready condition from the conditions of the enabled facets, and writes
// status.observedGeneration and status.phase. It never touches a child.
package readiness

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
)

// Name is the controller's name in --controllers.
const Name = "readiness"

// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases,verbs=get;list;watch
// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases/status,verbs=get;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Controller is the readiness controller.
type Controller struct{}

// New returns the readiness controller.
func New() Controller { return Controller{} }

// Name implements controller.Controller.
func (Controller) Name() string { return Name }

// ConditionType implements controller.Controller.
func (Controller) ConditionType() string { return dbv1.ConditionReady }

// SetupWithManager implements controller.Controller. Unlike the facets it
// reacts to every change of a Database, status included: that is where the
// facets report.
func (Controller) SetupWithManager(mgr ctrl.Manager, o facet.Options) error {
	r := newReconciler(mgr.GetClient(), facet.NewWriter(mgr, Name), o)
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&dbv1.Database{}).
		WithOptions(facet.ControllerOptions(o)).
		Complete(r)
}

// SetupDisabled implements controller.Controller.
func (c Controller) SetupDisabled(mgr ctrl.Manager, o facet.Options) error {
	return facet.SetupDisabled(mgr, Name, c.ConditionType(), o)
}

// reconciler writes the Ready summary of one Database.
type reconciler struct {
	client client.Client
	writer *facet.Writer
	facets []string
	// waitForFinalizer holds the first status write back until the cleanup
	// controller has added its finalizer, as the facets do, so that the
	// two do not race on a new Database (a status write would make the
	// finalizer patch conflict).
	waitForFinalizer bool
}

// newReconciler is the readiness reconciler that reads with c, writes Ready
// with w, and summarizes the facets of o.
func newReconciler(c client.Client, w *facet.Writer, o facet.Options) *reconciler {
	return &reconciler{client: c, writer: w, facets: o.Facets, waitForFinalizer: o.WaitForFinalizer}
}

// Reconcile implements reconcile.Reconciler.
func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	db := &dbv1.Database{}
	if err := r.client.Get(ctx, req.NamespacedName, db); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.waitForFinalizer && db.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(db, dbv1.Finalizer) {
		return ctrl.Result{}, nil // its arrival is an update that brings us back
	}
	ready := conditions.Summary(db, r.facets)
	observed := db.Status.ObservedGeneration
	if conditions.Observed(db, r.facets) {
		observed = db.Generation
	}
	status := dbv1ac.DatabaseStatus().
		WithPhase(conditions.Phase(ready)).
		WithObservedGeneration(observed)
	return ctrl.Result{}, r.writer.ApplyCondition(ctx, db, ready, status)
}
