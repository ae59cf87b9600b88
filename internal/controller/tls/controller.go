// Package tls is the controller of a Database's server certificate. It
// issues the certificate from a CA of the Database's own (Secret
// <name>-ca) into the kubernetes.io/tls Secret <name>-tls and renews it at
// two thirds of its lifetime, or has cert-manager do so when
// spec.tls.issuerRef is set; it keeps the ConfigMap of authentication
// rules that require TLS, and after a renewal makes the server load the
// new certificate without a restart. It owns the TLSReady condition and
// status.tls. Whether a Database uses TLS at all is resources.TLSFor's
// decision, which every controller that builds a pod shares.
package tls

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// Name is the controller's name in --controllers.
const Name = "tls"

// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases,verbs=get;list;watch
// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch
// +kubebuilder:rbac:groups=cert-manager.io,resources=certificates,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Event reasons of the controller.
const (
	// ReasonCertificateIssued: dbkeeper issued (or renewed) the server
	// certificate.
	ReasonCertificateIssued = "CertificateIssued"
	// ReasonServerReloaded: dbkeeper asked the server to reload its
	// configuration, to load a renewed certificate.
	ReasonServerReloaded = "ServerReloaded"
)

// Controller is the tls controller.
type Controller struct{}

// New returns the tls controller.
func New() Controller { return Controller{} }

// Name implements controller.Controller.
func (Controller) Name() string { return Name }

// ConditionType implements controller.Controller.
func (Controller) ConditionType() string { return dbv1.ConditionTLSReady }

// SetupWithManager implements controller.Controller.
func (c Controller) SetupWithManager(mgr ctrl.Manager, o facet.Options) error {
	w := facet.NewWriter(mgr, Name)
	s := &syncer{
		client:   mgr.GetClient(),
		reader:   mgr.GetAPIReader(),
		cache:    mgr.GetCache(),
		writer:   w,
		engines:  o.Engines,
		lifetime: o.TLSCertDuration,
		now:      time.Now,
		prober:   PostgresProber{},
		reloader: SuperuserReloader{Reader: mgr.GetAPIReader()},
	}
	if o.SkipTLSServerProbe {
		s.prober = nil
	}
	r := facet.NewReconciler(mgr.GetClient(), w, c.ConditionType(), s, o)
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&dbv1.Database{}, facet.ForDatabase()).
		// The TLS Secrets by label: dbkeeper's carry an owner reference,
		// cert-manager's only the labels of the Certificate's
		// secretTemplate.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(facet.DatabaseOf(resources.ComponentTLS)), builder.OnlyMetadata).
		Owns(&corev1.ConfigMap{}).
		// A pod that became ready or moved serves whatever its files hold
		// now: look at it.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(facet.DatabaseOf(resources.ComponentDatabase)),
			builder.WithPredicates(instance.ReachabilityChanged())).
		WithOptions(facet.ControllerOptions(o)).
		Complete(r)
}

// SetupDisabled implements controller.Controller.
func (c Controller) SetupDisabled(mgr ctrl.Manager, o facet.Options) error {
	return facet.SetupDisabled(mgr, Name, c.ConditionType(), o)
}

// syncer keeps the certificate, the authentication rules and what the
// server serves.
type syncer struct {
	client client.Client
	// reader reads Secrets from the API server: the cache holds only the
	// metadata of dbkeeper's Secrets, never a key.
	reader client.Reader
	// cache reads Secrets' metadata from the informer (the manager's
	// client sends every Secret read, metadata too, to the API server);
	// nil means client (the tests' fake).
	cache client.Reader
	// writer applies the children and records Events, which never hold a
	// key.
	writer  *facet.Writer
	engines engine.Catalog
	// lifetime of the server certificates dbkeeper issues; zero is
	// pki.DefaultLifetime.
	lifetime time.Duration
	now      func() time.Time
	// verified maps each Database to its certificate Secret as last
	// verified (a verified).
	verified sync.Map
	// prober learns what the server serves; nil with
	// --tls-server-probe=false.
	prober   Prober
	reloader Reloader
}

func (s *syncer) Sync(ctx context.Context, db *dbv1.Database) (facet.Outcome, error) {
	eng, err := s.engines.For(db.Spec.Engine)
	if err != nil {
		return facet.Outcome{}, reconcile.TerminalError(err)
	}
	state, err := facet.TLSState(ctx, s.client, db)
	if err != nil {
		return facet.Outcome{}, err
	}
	t := dbv1.ConditionTLSReady
	switch state {
	case resources.TLSDisabled, resources.TLSPlaintextKept:
		// The server takes plaintext, but the agents' endpoint serves
		// the Database's certificate all the same (resources.addAgentTLS):
		// the manager's requests and the agents' token never travel in
		// clear. No hba rules, no server to reload, no CA rotation.
		info, err := s.ensureCertificate(ctx, db, nil)
		if err != nil {
			return facet.Outcome{}, err
		}
		msg := "spec.tls.mode is Disabled: the server takes plaintext connections"
		reason := dbv1.ReasonTLSDisabled
		if state == resources.TLSPlaintextKept {
			reason = dbv1.ReasonPlaintextKept
			msg = fmt.Sprintf("this Database was created before dbkeeper had TLS, so its server keeps plaintext and its clients work unchanged; "+
				"set spec.tls.mode: Required to turn TLS on: the server restarts once, and clients must then connect with TLS, "+
				"verifying the server with the ca.crt of Secret %s", resources.TLSSecretName(db))
		}
		msg += fmt.Sprintf("; the instances' agents serve certificate %s of Secret %s (renewed at %s)",
			info.serial, resources.TLSSecretName(db), info.renewal.UTC().Format(time.RFC3339))
		return facet.Outcome{Condition: conditions.True(t, reason, msg), Status: statusOf(db, info),
			RequeueAfter: untilRenewal(info.renewal, s.now())}, nil
	}

	if err := s.applyHBA(ctx, db, eng); err != nil {
		return facet.Outcome{}, err
	}
	if db.Spec.TLS != nil && db.Spec.TLS.IssuerRef != nil {
		return s.syncCertManager(ctx, db, eng)
	}
	rotation, rotationAfter, stepped, err := s.rotateCA(ctx, db)
	if err != nil {
		return facet.Outcome{}, err
	}
	info, err := s.ensureCertificate(ctx, db, stepped)
	if err != nil {
		return facet.Outcome{}, err
	}
	out, err := s.observeServer(ctx, db, eng, info)
	if err != nil {
		return out, err
	}
	if rotation != nil {
		out.Status.TLS.WithCARotation(rotation)
	}
	if rotationAfter > 0 && (out.RequeueAfter == 0 || rotationAfter < out.RequeueAfter) {
		out.RequeueAfter = rotationAfter
	}
	return out, nil
}

// metadata is the named Secret's metadata from the cache, or nil.
func (s *syncer) metadata(ctx context.Context, db *dbv1.Database, name string) (*metav1.PartialObjectMetadata, error) {
	partial := &metav1.PartialObjectMetadata{}
	partial.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	r := s.cache
	if r == nil {
		r = s.client
	}
	live, err := apply.Live(ctx, r, client.ObjectKey{Namespace: db.Namespace, Name: name}, partial)
	if err != nil {
		return nil, fmt.Errorf("getting Secret %s: %w", name, err)
	}
	return live, nil
}
