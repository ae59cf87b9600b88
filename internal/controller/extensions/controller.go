package extensions

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// Name is the controller's name in --controllers.
const Name = "extensions"

// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases,verbs=get;list;watch
// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// How soon a Database is looked at again: in line (which puts back an
// extension dropped by hand), and while something waits (a restart that
// preloads a library, a refused statement). A primary that cannot be
// reached is retried with facet.Backoff; a pod turning Ready, as after the
// restart that preloads a library, brings it back sooner.
const (
	resyncAfter = 5 * time.Minute
	retryAfter  = 30 * time.Second
)

// Controller is the extensions controller.
type Controller struct{}

// New returns the extensions controller.
func New() Controller { return Controller{} }

// Name implements controller.Controller.
func (Controller) Name() string { return Name }

// ConditionType implements controller.Controller.
func (Controller) ConditionType() string { return dbv1.ConditionExtensionsReady }

// SetupWithManager implements controller.Controller.
func (c Controller) SetupWithManager(mgr ctrl.Manager, o facet.Options) error {
	w := facet.NewWriter(mgr, Name)
	s := &syncer{secrets: o.SecretReader(mgr), instances: o.Instances, writer: w}
	r := facet.NewReconciler(mgr.GetClient(), w, c.ConditionType(), s, o)
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&dbv1.Database{}, facet.ForDatabase()).
		// The primary turning Ready (or getting a new IP), as after the
		// restart that preloads a library, is when the extensions can be
		// created.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(facet.DatabaseOf(resources.ComponentDatabase)),
			builder.WithPredicates(instance.ReachabilityChanged())).
		WithOptions(facet.ControllerOptions(o)).
		Complete(r)
}

// SetupDisabled implements controller.Controller.
func (c Controller) SetupDisabled(mgr ctrl.Manager, o facet.Options) error {
	return facet.SetupDisabled(mgr, Name, c.ConditionType(), o)
}
