package roles

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// Name is the controller's name in --controllers.
const Name = "roles"

// IndexPasswordSecrets is the field index of Databases by the Secrets
// their roles' passwordSecret names.
const IndexPasswordSecrets = "spec.roles.passwordSecret.name"

// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases,verbs=get;list;watch
// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// How soon a Database is looked at again: in line (which repairs a role
// altered by hand), and while a drop waits for sessions to end or the
// application's role to appear (a primary that cannot be reached is
// retried with facet.Backoff; a pod turning Ready brings it back sooner).
const (
	resyncAfter = 5 * time.Minute
	retryAfter  = 30 * time.Second
)

// Controller is the roles controller.
type Controller struct{}

// New returns the roles controller.
func New() Controller { return Controller{} }

// Name implements controller.Controller.
func (Controller) Name() string { return Name }

// ConditionType implements controller.Controller.
func (Controller) ConditionType() string { return dbv1.ConditionRolesReady }

// SetupWithManager implements controller.Controller.
func (c Controller) SetupWithManager(mgr ctrl.Manager, o facet.Options) error {
	w := facet.NewWriter(mgr, Name)
	s := &syncer{secrets: o.SecretReader(mgr), instances: o.Instances, writer: w, allowPrivileged: o.AllowPrivilegedRoles}
	r := facet.NewReconciler(mgr.GetClient(), w, c.ConditionType(), s, o)
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &dbv1.Database{}, IndexPasswordSecrets, passwordSecretsOf); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr)
	if o.SecretMetadata != nil {
		// The passwordSecrets are the users' (unlabelled): their metadata,
		// from the second cache, says when one changes, appears or goes;
		// the data is read from the API server only then (o.Secrets).
		secretMeta := &metav1.PartialObjectMetadata{}
		secretMeta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		b = b.WatchesRawSource(source.Kind(o.SecretMetadata, client.Object(secretMeta),
			handler.EnqueueRequestsFromMapFunc(databasesNaming(mgr.GetClient()))))
	}
	return b.
		Named(Name).
		For(&dbv1.Database{}, facet.ForDatabase()).
		// The primary turning Ready (or getting a new IP) is when the
		// roles can reach the server.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(facet.DatabaseOf(resources.ComponentDatabase)),
			builder.WithPredicates(instance.ReachabilityChanged())).
		WithOptions(facet.ControllerOptions(o)).
		Complete(r)
}

// SetupDisabled implements controller.Controller.
func (c Controller) SetupDisabled(mgr ctrl.Manager, o facet.Options) error {
	return facet.SetupDisabled(mgr, Name, c.ConditionType(), o)
}

// passwordSecretsOf is the IndexPasswordSecrets index function.
func passwordSecretsOf(obj client.Object) []string {
	db, ok := obj.(*dbv1.Database)
	if !ok {
		return nil
	}
	var names []string
	for _, r := range db.Spec.Roles {
		if r.PasswordSecret != nil {
			names = append(names, r.PasswordSecret.Name)
		}
	}
	return names
}

// databasesNaming maps a Secret to the Databases of its namespace whose
// roles name it, read through the field index of the cache c.
func databasesNaming(c client.Reader) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		return facet.DatabasesNaming(ctx, c, IndexPasswordSecrets, obj)
	}
}
