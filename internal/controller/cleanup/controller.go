// Package cleanup is the controller of a Database's deletion. It adds the
// finalizer before any child exists and, when the Database is deleted,
// carries out spec.deletionPolicy before letting it go. It owns the Deleting
// condition, present only while the Database is terminating.
package cleanup

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/marker"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// Name is the controller's name in --controllers.
const Name = "cleanup"

// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases/status,verbs=get;patch
// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=batch,resources=cronjobs,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;delete

// waitRetry is how often cleanup looks again while it waits for the
// StatefulSet and its pods to go.
const waitRetry = 5 * time.Second

// Controller is the cleanup controller.
type Controller struct{}

// New returns the cleanup controller.
func New() Controller { return Controller{} }

// Name implements controller.Controller.
func (Controller) Name() string { return Name }

// ConditionType implements controller.Controller.
func (Controller) ConditionType() string { return dbv1.ConditionDeleting }

// SetupWithManager implements controller.Controller.
func (c Controller) SetupWithManager(mgr ctrl.Manager, o facet.Options) error {
	r := newReconciler(mgr.GetClient(), facet.NewWriter(mgr, Name).WhileDeleting())
	r.engines = o.Engines
	r.key = o.MarkerKey
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&dbv1.Database{}, facet.ForDatabase()).
		// The final backup Job of spec.backup.beforeDelete.
		Watches(&batchv1.Job{}, handler.EnqueueRequestsFromMapFunc(facet.DatabaseOf(resources.ComponentBackup))).
		// The StatefulSet whose pods must be gone before the data PVCs
		// are deleted; by label, since orphan deletion takes its owner
		// reference.
		Watches(&appsv1.StatefulSet{}, handler.EnqueueRequestsFromMapFunc(facet.DatabaseOf(resources.ComponentDatabase))).
		WithOptions(facet.ControllerOptions(o)).
		Complete(r)
}

// SetupDisabled implements controller.Controller. With cleanup off nobody
// would ever remove the finalizer, so the stand-in removes it from every
// Database: deletion then relies on garbage collection alone, which takes
// the children with owner references (the StatefulSet and its pods, the
// Services, the CronJob, unless the propagation is orphan) and nothing that
// holds data: the data PVCs, the generated Secret and the backup PVC carry
// no owner reference to the Database, whatever the policy.
func (c Controller) SetupDisabled(mgr ctrl.Manager, o facet.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name+"-disabled").
		For(&dbv1.Database{}, facet.ForDatabase()).
		WithOptions(facet.ControllerOptions(o)).
		Complete(newReleaser(mgr.GetClient()))
}

// reconciler adds the finalizer and carries out the deletion policy.
type reconciler struct {
	client client.Client
	writer *facet.Writer
	// engines is the image catalog of the final backup Job; the zero one
	// is the built-in.
	engines engine.Catalog
	// key verifies dbkeeper's mark on the credentials and superuser
	// Secrets (marker): a Secret of their names without it was planted by
	// somebody else, refused by the secret controller, and is not deleted
	// either. The zero key checks nothing.
	key marker.Key
}

// newReconciler is the cleanup reconciler that reads, deletes and patches
// with c, and writes Deleting and status.deletion and creates the final
// backup Job with w.
func newReconciler(c client.Client, w *facet.Writer) *reconciler {
	return &reconciler{client: c, writer: w}
}

// Reconcile implements reconcile.Reconciler.
func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	db := &dbv1.Database{}
	if err := r.client.Get(ctx, req.NamespacedName, db); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	preview, err := r.preview(ctx, db)
	if err != nil {
		return ctrl.Result{}, err
	}
	if db.DeletionTimestamp.IsZero() {
		if err := r.patchFinalizer(ctx, db, controllerutil.AddFinalizer); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.writer.ApplyStatus(ctx, db, preview); err != nil {
			return ctrl.Result{}, fmt.Errorf("applying status.deletion: %w", err)
		}
		return ctrl.Result{}, nil
	}
	if !controllerutil.ContainsFinalizer(db, dbv1.Finalizer) {
		return ctrl.Result{}, nil
	}
	t := dbv1.ConditionDeleting
	if db.Spec.DeletionPolicy == dbv1.DeletionPolicyDoNotDelete {
		cond := conditions.False(t, dbv1.ReasonDeletionBlocked,
			"spec.deletionPolicy is DoNotDelete: the Database stays until you change the policy to Delete, Retain or WipeOut")
		return ctrl.Result{}, r.writer.ApplyCondition(ctx, db, cond, preview)
	}
	if wait, err := r.finalBackup(ctx, db); err != nil || wait != nil {
		if err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.writer.ApplyCondition(ctx, db, *wait, preview)
	}
	plan := planFor(db.Spec.DeletionPolicy)
	cond := conditions.True(t, dbv1.ReasonCleaningUp, fmt.Sprintf("carrying out deletionPolicy %s: %s", db.Spec.DeletionPolicy, plan))
	if err := r.writer.ApplyCondition(ctx, db, cond, preview); err != nil {
		return ctrl.Result{}, err
	}
	waiting, err := r.carryOut(ctx, db, plan)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("carrying out deletionPolicy %s: %w", db.Spec.DeletionPolicy, err)
	}
	if waiting != "" {
		cond := conditions.True(t, dbv1.ReasonCleaningUp, fmt.Sprintf("carrying out deletionPolicy %s: waiting for %s to go before deleting the volumes it uses",
			db.Spec.DeletionPolicy, waiting))
		// The StatefulSet's deletion brings us back; the requeue is for a
		// missed event only.
		return ctrl.Result{RequeueAfter: waitRetry}, r.writer.ApplyCondition(ctx, db, cond, preview)
	}
	log.FromContext(ctx).Info("Removing finalizer", "deletionPolicy", db.Spec.DeletionPolicy)
	return ctrl.Result{}, r.patchFinalizer(ctx, db, controllerutil.RemoveFinalizer)
}

func (r *reconciler) list(ctx context.Context, db *dbv1.Database, component string, list client.ObjectList) error {
	sel := labels.SelectorFromSet(resources.Labels(db, component))
	if err := r.client.List(ctx, list, client.InNamespace(db.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return fmt.Errorf("listing %s objects: %w", component, err)
	}
	return nil
}

func (r *reconciler) patchFinalizer(ctx context.Context, db *dbv1.Database, change func(client.Object, string) bool) error {
	before := db.DeepCopy()
	if !change(db, dbv1.Finalizer) {
		return nil
	}
	if err := r.client.Patch(ctx, db, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("patching finalizers: %w", err))
	}
	return nil
}
