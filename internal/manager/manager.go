// Package manager builds dbkeeper's controller-runtime manager: the scheme,
// the cache discipline, the metrics and health endpoints, leader election,
// and the registry of controllers. cmd/manager turns flags into Options;
// the integration tests build the very same manager.
package manager

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/instancemetrics"
	"github.com/dbkeeper/dbkeeper/internal/logging"
	"github.com/dbkeeper/dbkeeper/internal/marker"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// Options configure the manager.
type Options struct {
	// Controllers are the enabled controllers.
	Controllers controller.Enabled
	// WatchNamespaces limits the manager to these namespaces; empty means
	// every namespace.
	WatchNamespaces []string
	// MaxConcurrentReconciles is per controller.
	MaxConcurrentReconciles int
	// Engines is the image catalog of the engines (--engine-registry,
	// --engine-images); the zero Catalog is the built-in one.
	Engines engine.Catalog
	// TLSCertDuration is the lifetime of the server certificates dbkeeper
	// issues (--tls-cert-duration); zero is 90 days.
	TLSCertDuration time.Duration
	// SkipTLSServerProbe: see facet.Options (--tls-server-probe=false).
	SkipTLSServerProbe bool
	// AgentImage is the image the engine pods copy the instance agent
	// from (--agent-image): the manager's own. Required.
	AgentImage string
	// AgentBinary is the build the agents of running pods take over in
	// place (--agent-takeover: the manager's own executable); nil: the
	// pods run a new agent only once they restart.
	AgentBinary *instance.AgentBinary
	// NetworkPolicies keeps a NetworkPolicy for every Database that does
	// not turn it off (--network-policies); Manager is how those policies
	// name the manager's pods (--manager-namespace, --manager-pod-labels).
	NetworkPolicies bool
	Manager         resources.ManagerPeer
	// AllowPrivilegedRoles lets the roles of spec.roles be SUPERUSER,
	// REPLICATION or BYPASSRLS (--allow-privileged-roles).
	AllowPrivilegedRoles bool
	// MarkerKey signs the credentials and superuser Secrets dbkeeper
	// makes (marker); nil means the key of Secret marker.KeySecretName in
	// Manager.Namespace, made on the first start, or, without a namespace
	// (a manager outside the cluster), a key of this process only.
	MarkerKey marker.Key
	// MetricsBindAddress serves /metrics; "0" disables it.
	MetricsBindAddress string
	// MetricsSecure serves /metrics over HTTPS to authenticated and
	// authorized callers only: a bearer token the API server accepts
	// (TokenReview) whose user may get the non-resource URL /metrics
	// (SubjectAccessReview). Plain HTTP to anyone otherwise.
	MetricsSecure bool
	// MetricsCertDir holds the serving certificate (tls.crt, tls.key) of
	// the secure /metrics, reloaded when it changes; empty, or without
	// those files, means a self-signed certificate made at start-up.
	MetricsCertDir string
	// HealthProbeBindAddress serves /healthz and /readyz; "0" disables it.
	HealthProbeBindAddress string
	// LeaderElection makes one replica of the manager active at a time.
	LeaderElection bool
	// LeaderElectionNamespace holds the lease; empty means the namespace the
	// manager runs in.
	LeaderElectionNamespace string
	// LeaderElectionID names the lease.
	LeaderElectionID string
	// LeaseDuration is how long followers wait after the last renewal
	// before taking the lease of a leader that stopped renewing it (it
	// crashed); RenewDeadline is how long the leader retries renewing
	// before it gives up leading; RetryPeriod is the pause between
	// attempts. Zero keeps controller-runtime's 15s, 10s and 2s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// SyncPeriod is how often every Database is reconciled without an event;
	// zero means controller-runtime's default (10 hours).
	SyncPeriod time.Duration
	// NewClient, when set, replaces controller-runtime's client constructor;
	// tests wrap the client with it to count the operator's writes.
	NewClient client.NewClientFunc
	// Logger, when set, is the manager's logger instead of the global one.
	// Either is capped with logging.Capped, so no verbosity flag can make
	// client-go log a Secret's body.
	Logger logr.Logger
	// Instances connects to the Databases' servers; nil means
	// instance.Pods, to the pods' IPs. Tests without PostgreSQL (envtest,
	// kwok) pass a stand-in.
	Instances instance.Connector
	// Agents reaches the agents of the Databases' instances; nil means
	// instance.PodAgents, at the pods' IPs. Tests without agents (envtest,
	// kwok) pass a stand-in.
	Agents instance.Agents
	// InstanceMetricsInterval is how often the manager scrapes the
	// PostgreSQL metrics of every instance from its agent and serves the
	// last values on its own /metrics (--instance-metrics-interval,
	// internal/instancemetrics); zero turns it off, and so does a
	// MetricsBindAddress of "0", or Agents that serve no metrics (a
	// stand-in without an instancemetrics.Source).
	InstanceMetricsInterval time.Duration
	// SkipNameValidation lets several managers with the same controllers run
	// in one process, as the integration tests do.
	SkipNameValidation bool
}

// Leader election holds a Lease in the manager's namespace (the kustomize
// and Helm installs set it); the rule becomes a Role, not a ClusterRole.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update,namespace=dbkeeper-system
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch,namespace=dbkeeper-system
// The key that marks the Secrets dbkeeper makes (marker.Load).
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create,namespace=dbkeeper-system

// Scheme is the scheme of the manager: the built-in types and dbkeeper's.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(dbv1.AddToScheme(s))
	return s
}

// New builds the manager with every enabled controller registered.
func New(cfg *rest.Config, o Options) (ctrl.Manager, error) {
	if o.AgentImage == "" {
		return nil, errors.New("no agent image: the engine pods copy the instance agent from the manager's own image (--agent-image)")
	}
	id := o.LeaderElectionID
	if id == "" {
		id = "dbkeeper.database.dbkeeper.io"
	}
	logger := o.Logger
	if logger.GetSink() == nil {
		logger = ctrl.Log
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  Scheme(),
		Cache:                   CacheOptions(o.WatchNamespaces, o.SyncPeriod),
		Client:                  client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		NewClient:               o.NewClient,
		Logger:                  logging.Capped(logger),
		Controller:              config.Controller{SkipNameValidation: &o.SkipNameValidation},
		Metrics:                 MetricsOptions(o),
		HealthProbeBindAddress:  o.HealthProbeBindAddress,
		LeaderElection:          o.LeaderElection,
		LeaderElectionID:        id,
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		LeaseDuration:           nonZero(o.LeaseDuration),
		RenewDeadline:           nonZero(o.RenewDeadline),
		RetryPeriod:             nonZero(o.RetryPeriod),
		// The lease is given up on a clean stop, so a new leader need not
		// wait for it to expire; the manager exits right after.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding ready check: %w", err)
	}
	secrets, err := cache.New(cfg, SecretMetadataCacheOptions(mgr, o.WatchNamespaces))
	if err != nil {
		return nil, fmt.Errorf("creating the Secret metadata cache: %w", err)
	}
	if err := mgr.Add(secrets); err != nil {
		return nil, fmt.Errorf("adding the Secret metadata cache: %w", err)
	}
	key, err := markerKey(cfg, o, logger)
	if err != nil {
		return nil, err
	}
	secretData := instance.NewSecretReader(mgr.GetAPIReader(), secrets)
	instances := o.Instances
	if instances == nil {
		instances = instance.Pods{Pods: mgr.GetClient(), Secrets: secretData}
	}
	if err := controller.Setup(mgr, o.Controllers, facet.Options{MaxConcurrentReconciles: o.MaxConcurrentReconciles, Engines: o.Engines,
		Instances: instances, Agents: o.Agents, SecretMetadata: secrets, Secrets: secretData,
		TLSCertDuration: o.TLSCertDuration, SkipTLSServerProbe: o.SkipTLSServerProbe, AgentImage: o.AgentImage,
		AgentBinary: o.AgentBinary, NetworkPolicies: o.NetworkPolicies, Manager: o.Manager, MarkerKey: key, AllowPrivilegedRoles: o.AllowPrivilegedRoles}); err != nil {
		return nil, err
	}
	if err := addInstanceMetrics(mgr, o, secretData); err != nil {
		return nil, err
	}
	return mgr, nil
}

// addInstanceMetrics adds the scraper of the instances' metrics to mgr,
// unless o turns it off (instanceMetricsSource).
func addInstanceMetrics(mgr ctrl.Manager, o Options, secrets client.Reader) error {
	source := instanceMetricsSource(o, secrets)
	if source == nil {
		return nil
	}
	scraper, err := instancemetrics.New(mgr.GetClient(), source, instancemetrics.Options{
		Interval: o.InstanceMetricsInterval, Log: mgr.GetLogger().WithName("instance-metrics")})
	if err != nil {
		return err
	}
	if err := mgr.Add(scraper); err != nil {
		return fmt.Errorf("adding the instance metrics scraper: %w", err)
	}
	return nil
}

// instanceMetricsSource is how the manager reaches the agents' metrics:
// as the controllers reach the agents (instance.PodAgents reading Secrets
// with secrets), or through o.Agents when that stand-in serves metrics;
// nil when o turns the scrapes off (no interval, no /metrics, or a
// stand-in without metrics).
func instanceMetricsSource(o Options, secrets client.Reader) instancemetrics.Source {
	if o.InstanceMetricsInterval <= 0 || o.MetricsBindAddress == "0" {
		return nil
	}
	if o.Agents == nil {
		return instance.PodAgents{Secrets: secrets}
	}
	if s, ok := o.Agents.(instancemetrics.Source); ok {
		return s
	}
	return nil
}

// markerKey is o.MarkerKey, or the key of the manager's namespace
// (marker.Load, with a client of its own: the manager's cache is not
// started yet), or, without a namespace, a key of this process, said in
// the log: Secrets a deletion policy kept are then recognised only by
// this process.
func markerKey(cfg *rest.Config, o Options, log logr.Logger) (marker.Key, error) {
	if len(o.MarkerKey) > 0 {
		return o.MarkerKey, nil
	}
	if o.Manager.Namespace == "" {
		log.Info("No manager namespace (--manager-namespace, $POD_NAMESPACE): the key that marks the Secrets dbkeeper makes lives in this process only; a Database of the same name made after a restart will not adopt the Secrets a Retain deletion kept")
		return marker.NewKey()
	}
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, fmt.Errorf("a client for the marker key: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return marker.Load(ctx, c, o.Manager.Namespace)
}

// The secure metrics endpoint asks the API server who a caller is and
// whether they may get /metrics. Both reviews are cluster-scoped: the Helm
// chart grants them with a ClusterRole of their own (metrics-auth), even in
// a namespaced install, so these rules are not markers here (the markers
// also become the per-namespace Roles of that install).

// MetricsOptions are the options of the /metrics server: plain HTTP, or
// with MetricsSecure HTTPS behind controller-runtime's authentication and
// authorization filter, the way kubebuilder's scaffold serves it. HTTP/2 is
// off on the secure server (HTTP/2 Rapid Reset, CVE-2023-44487), as in
// that scaffold; Prometheus scrapes over HTTP/1.1.
func MetricsOptions(o Options) metricsserver.Options {
	m := metricsserver.Options{BindAddress: o.MetricsBindAddress}
	if !o.MetricsSecure {
		return m
	}
	m.SecureServing = true
	m.FilterProvider = filters.WithAuthenticationAndAuthorization
	m.CertDir = o.MetricsCertDir
	m.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	return m
}

// CacheOptions keep the operator's memory independent of what else runs in
// the cluster: children (and the pods of backup Jobs, which inherit the
// labels of the Job's template) are cached only when dbkeeper labelled them,
// managedFields are stripped from everything, and Secrets are cached as
// metadata only (typed Secret reads go to the API server, see New), so no
// password is ever held in the cache.
func CacheOptions(namespaces []string, syncPeriod time.Duration) cache.Options {
	managed := labels.SelectorFromSet(labels.Set{resources.LabelManagedBy: resources.ManagedBy})
	byLabel := cache.ByObject{Label: managed}
	secretMeta := &metav1.PartialObjectMetadata{}
	secretMeta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	o := cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&appsv1.StatefulSet{}:           byLabel,
			&corev1.Service{}:               byLabel,
			&corev1.PersistentVolumeClaim{}: byLabel,
			&batchv1.CronJob{}:              byLabel,
			&batchv1.Job{}:                  byLabel,
			&corev1.Pod{}:                   byLabel,
			&corev1.Secret{}:                byLabel,
			&corev1.ConfigMap{}:             byLabel,
			&policyv1.PodDisruptionBudget{}: byLabel,
			&corev1.ServiceAccount{}:        byLabel,
			&rbacv1.Role{}:                  byLabel,
			&rbacv1.RoleBinding{}:           byLabel,
			&coordinationv1.Lease{}:         byLabel,
			&networkingv1.NetworkPolicy{}:   byLabel,
			secretMeta:                      byLabel,
		},
	}
	if syncPeriod > 0 {
		o.SyncPeriod = &syncPeriod
	}
	if len(namespaces) > 0 {
		o.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			o.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return o
}

// SecretMetadataCacheOptions configure the second cache of the manager:
// the metadata of every Secret in the watched namespaces, without the label
// selector of the main cache, for the watch of the users' Secrets (named
// in spec.credentials.secretName, which dbkeeper never labels since it
// never writes them). A second cache rather than dropping the selector in
// the main one (cache.Options.ByObject is per GroupVersionKind, so the
// typed and the metadata Secret share one selector): the main cache keeps
// telling dbkeeper's own Secrets from foreign ones under a generated name,
// and every other reader keeps its label-selected view. It holds metadata
// only, never data, and starts an informer only when a watch asks for it
// (with the secret controller disabled it watches nothing); it runs with
// the controllers, on the leader.
func SecretMetadataCacheOptions(mgr ctrl.Manager, namespaces []string) cache.Options {
	secretMeta := &metav1.PartialObjectMetadata{}
	secretMeta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	o := cache.Options{
		HTTPClient:       mgr.GetHTTPClient(),
		Scheme:           mgr.GetScheme(),
		Mapper:           mgr.GetRESTMapper(),
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject:         map[client.Object]cache.ByObject{secretMeta: {}},
	}
	if len(namespaces) > 0 {
		o.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			o.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return o
}

// nonZero is d, or nil (controller-runtime's default) when d is zero.
func nonZero(d time.Duration) *time.Duration {
	if d == 0 {
		return nil
	}
	return &d
}
