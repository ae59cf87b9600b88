// Package secret is the controller of a Database's credentials. It generates
// the <name>-credentials Secret once and never regenerates it, or checks the
// user's Secret named in spec.credentials.secretName and never modifies it;
// it generates <name>-superuser once, and <name>-replication (the
// replication role's password and the agents' token) once; and it keeps
// the server in line with
// the application's Secret: the role, its database, and its password, set
// whenever the Secret's password changes (docs/design/roles-and-rotation.md).
// It owns the CredentialsReady condition, status.credentials and the
// deprecated status.credentialsSecret.
package secret

import (
	"context"
	"fmt"
	"strings"

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
const Name = "secret"

// IndexSecretName is the field index of Databases by the user's Secret
// they name in spec.credentials.secretName.
const IndexSecretName = "spec.credentials.secretName"

// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases,verbs=get;list;watch
// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Controller is the secret controller.
type Controller struct{}

// New returns the secret controller.
func New() Controller { return Controller{} }

// Name implements controller.Controller.
func (Controller) Name() string { return Name }

// ConditionType implements controller.Controller.
func (Controller) ConditionType() string { return dbv1.ConditionCredentialsReady }

// SetupWithManager implements controller.Controller.
func (c Controller) SetupWithManager(mgr ctrl.Manager, o facet.Options) error {
	w := facet.NewWriter(mgr, Name)
	s := newSyncer(mgr.GetClient(), mgr.GetAPIReader(), w, o.Instances)
	s.metadata = mgr.GetCache()
	s.marks.Key = o.MarkerKey
	r := facet.NewReconciler(mgr.GetClient(), w, c.ConditionType(), s, o)
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &dbv1.Database{}, IndexSecretName, secretNameOf); err != nil {
		return fmt.Errorf("indexing Databases by %s: %w", IndexSecretName, err)
	}
	b := ctrl.NewControllerManagedBy(mgr)
	if o.SecretMetadata != nil {
		// Every Secret's metadata, from the second cache (the main one
		// holds only dbkeeper's labelled Secrets): a user's Secret changes,
		// appears or goes, and the Databases naming it are reconciled at
		// once; so is a Database whose generated name a foreign Secret took.
		secretMeta := &metav1.PartialObjectMetadata{}
		secretMeta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		b = b.WatchesRawSource(source.Kind(o.SecretMetadata, client.Object(secretMeta),
			handler.EnqueueRequestsFromMapFunc(databasesNaming(mgr.GetClient()))))
	}
	return b.
		Named(Name).
		For(&dbv1.Database{}, facet.ForDatabase()).
		// The generated Secret has no owner reference (a deletion policy
		// may keep it): find its Database by the instance label. Metadata
		// only: the cache never holds a password.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(facet.DatabaseOf(resources.ComponentCredentials)), builder.OnlyMetadata).
		// The superuser Secret likewise (a second handler on the same
		// metadata informer).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(facet.DatabaseOf(resources.ComponentSuperuser)), builder.OnlyMetadata).
		// Instance 0 turning Ready (or getting a new IP) is when a pending
		// password can reach the server.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(facet.DatabaseOf(resources.ComponentDatabase)),
			builder.WithPredicates(instance.ReachabilityChanged())).
		// The replication Secret: the engine pods cannot start without it.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(facet.DatabaseOf(resources.ComponentReplication)), builder.OnlyMetadata).
		// The server's TLS Secret: its ca.crt is copied into the generated
		// Secret.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(facet.DatabaseOf(resources.ComponentTLS)), builder.OnlyMetadata).
		WithOptions(facet.ControllerOptions(o)).
		Complete(r)
}

// SetupDisabled implements controller.Controller.
func (c Controller) SetupDisabled(mgr ctrl.Manager, o facet.Options) error {
	return facet.SetupDisabled(mgr, Name, c.ConditionType(), o)
}

// secretNameOf is the IndexSecretName index function.
func secretNameOf(obj client.Object) []string {
	db, ok := obj.(*dbv1.Database)
	if !ok || !resources.UserSecret(db) {
		return nil
	}
	return []string{db.Spec.Credentials.SecretName}
}

// databasesNaming maps a Secret to the Databases of its namespace whose
// spec.credentials.secretName names it, read through the field index of
// the cache c, and to the Database whose generated Secret would have its
// name.
func databasesNaming(c client.Reader) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		reqs := facet.DatabasesNaming(ctx, c, IndexSecretName, obj)
		if name, ok := strings.CutSuffix(obj.GetName(), resources.GeneratedSecretSuffix); ok && name != "" {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}})
		}
		return reqs
	}
}
