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
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/pki"
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

// reloadRecheck is how soon the controller looks again at a server that
// does not serve the Secret's certificate yet: the kubelet updates mounted
// Secrets on its sync (about a minute by default).
const reloadRecheck = 5 * time.Second

// unreachableRecheck is how soon the controller tries again a server it
// could not reach.
const unreachableRecheck = time.Minute

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
		info, err := s.ensureCertificate(ctx, db)
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
			RequeueAfter: max(info.renewal.Sub(s.now()), time.Second)}, nil
	}

	if err := s.applyHBA(ctx, db, eng); err != nil {
		return facet.Outcome{}, err
	}
	if db.Spec.TLS != nil && db.Spec.TLS.IssuerRef != nil {
		return s.syncCertManager(ctx, db, eng)
	}
	rotation, rotationAfter, err := s.rotateCA(ctx, db)
	if err != nil {
		return facet.Outcome{}, err
	}
	info, err := s.ensureCertificate(ctx, db)
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

// certInfo is what the controller knows of the Secret's certificate:
// everything when it read or issued it, only what status.tls and the
// Secret's annotations say after a restart (raw and ca nil; they are read
// when needed).
type certInfo struct {
	serial            string
	notAfter, renewal time.Time
	raw, ca           []byte
}

func infoOf(cert *x509.Certificate, ca []byte) certInfo {
	return certInfo{serial: pki.Serial(cert), notAfter: cert.NotAfter, renewal: pki.RenewalTime(cert), raw: cert.Raw, ca: ca}
}

// applyHBA keeps the ConfigMap of the authentication rules.
func (s *syncer) applyHBA(ctx context.Context, db *dbv1.Database, eng engine.Engine) error {
	name := resources.HBAConfigMapName(db)
	live, err := apply.Live(ctx, s.client, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.ConfigMap{})
	if err != nil {
		return fmt.Errorf("getting ConfigMap %s: %w", name, err)
	}
	if _, err := s.writer.Apply(ctx, live, resources.HBAConfigMap(db, eng)); err != nil {
		return fmt.Errorf("applying ConfigMap %s: %w", name, err)
	}
	return nil
}

// ensureCertificate makes the CA once and issues the server certificate
// when there is none, when it is not the CA's or not for the Database's
// names, or when its renewal time has come; it returns the CA certificate
// and the server certificate. A certificate Secret verified before, whose
// and whose CA Secret's resourceVersions (in the metadata cache) have not
// changed since, is not read again: a converged Database costs no Secret
// read, and a restarted manager reads each certificate Secret once.
func (s *syncer) ensureCertificate(ctx context.Context, db *dbv1.Database) (certInfo, error) {
	now := s.now()
	name := resources.TLSSecretName(db)
	key := client.ObjectKeyFromObject(db)
	caMeta, err := s.metadata(ctx, db, resources.CASecretName(db))
	if err != nil {
		return certInfo{}, err
	}
	tlsMeta, err := s.metadata(ctx, db, name)
	if err != nil {
		return certInfo{}, err
	}
	version := ""
	if caMeta != nil && tlsMeta != nil {
		version = caMeta.ResourceVersion + "/" + tlsMeta.ResourceVersion
		if v, ok := s.verified.Load(key); ok {
			if v := v.(verified); v.version == version && now.Before(pki.RenewalTime(v.cert)) {
				return infoOf(v.cert, v.ca), nil
			}
		}
		// A restarted manager: status.tls and the Secrets' annotations
		// say which certificate dbkeeper put there; it is read when the
		// server serves another one, and at renewal.
		if st := db.Status.TLS; st != nil && st.SerialNumber != "" && st.NotAfter != nil && st.RenewalTime != nil &&
			tlsMeta.Annotations[resources.AnnotationSerial] == st.SerialNumber &&
			tlsMeta.Annotations[resources.AnnotationClientAuth] == "true" &&
			caMeta.Annotations[resources.AnnotationCASHA256] != "" &&
			tlsMeta.Annotations[resources.AnnotationCASHA256] == caMeta.Annotations[resources.AnnotationCASHA256] &&
			now.Before(st.RenewalTime.Time) {
			return certInfo{serial: st.SerialNumber, notAfter: st.NotAfter.Time, renewal: st.RenewalTime.Time}, nil
		}
	}
	why := "there is none"
	if tlsMeta != nil {
		live, err := apply.Live(ctx, s.reader, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.Secret{})
		if err != nil {
			return certInfo{}, fmt.Errorf("getting Secret %s: %w", name, err)
		}
		if live != nil {
			pair := pki.KeyPair{Cert: live.Data[corev1.TLSCertKey], Key: live.Data[corev1.TLSPrivateKeyKey]}
			ca := live.Data[resources.CACertKey]
			cert, err := pki.CheckServer(pair, ca, resources.ServerDNSNames(db), now)
			sameCA, caErr := s.isCA(ctx, db, caMeta, ca)
			switch {
			case caErr != nil:
				return certInfo{}, caErr
			case err != nil:
				why = err.Error()
			case !sameCA:
				why = "its ca.crt is not the CA's"
			case !pki.ClientAuthUsable(cert):
				// issued before the instances authenticated to each other
				// with it (replication, backups from standbys)
				why = "it cannot authenticate a client"
			case !now.Before(pki.RenewalTime(cert)):
				why = "its renewal time has come"
			default:
				if version != "" && version == caMeta.ResourceVersion+"/"+live.ResourceVersion {
					s.verified.Store(key, verified{version: version, cert: cert, ca: ca})
				}
				return infoOf(cert, ca), nil
			}
		}
	}
	ca, bundle, err := s.ensureCA(ctx, db)
	if err != nil {
		return certInfo{}, err
	}
	pair, err := pki.IssueServer(ca, resources.ServerDNSNames(db), now, s.certLifetime())
	if err != nil {
		return certInfo{}, fmt.Errorf("issuing the server certificate: %w", err)
	}
	cert, err := pki.ParseCertificate(pair.Cert)
	if err != nil {
		return certInfo{}, fmt.Errorf("reading the certificate just issued: %w", err)
	}
	log.FromContext(ctx).Info("Issuing server certificate", "Secret", klog.KRef(db.Namespace, name),
		"serial", pki.Serial(cert), "notAfter", cert.NotAfter.UTC().Format(time.RFC3339), "why", why)
	// Applied without a live object, so it is always sent: the new key
	// must reach the Secret.
	if _, err := s.writer.Apply(ctx, nil, resources.TLSSecret(db, pair.Cert, pair.Key, bundle, pki.Serial(cert))); err != nil {
		return certInfo{}, fmt.Errorf("applying Secret %s: %w", name, err)
	}
	s.writer.Eventf(db, nil, corev1.EventTypeNormal, ReasonCertificateIssued, "IssueCertificate",
		"Issued server certificate %s into Secret %s (%s)", pki.Serial(cert), name, why)
	return infoOf(cert, bundle), nil
}

// isCA reports whether caPEM is what the Database's CA Secret says to
// trust (resources.CABundle): by the CA Secret's AnnotationCASHA256 in the
// cache, or, when the cache does not have it (yet), by reading the CA
// Secret.
func (s *syncer) isCA(ctx context.Context, db *dbv1.Database, caMeta *metav1.PartialObjectMetadata, caPEM []byte) (bool, error) {
	if caMeta != nil && caMeta.Annotations[resources.AnnotationCASHA256] != "" {
		return caMeta.Annotations[resources.AnnotationCASHA256] == resources.CASHA256(caPEM), nil
	}
	name := resources.CASecretName(db)
	live, err := apply.Live(ctx, s.reader, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.Secret{})
	if err != nil {
		return false, fmt.Errorf("getting Secret %s: %w", name, err)
	}
	return live != nil && bytes.Equal(resources.CABundle(live), caPEM), nil
}

// verified is a certificate Secret as last verified: the resourceVersions
// of the CA and certificate Secrets, and the public certificates (never a
// key).
type verified struct {
	version string
	cert    *x509.Certificate
	ca      []byte
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

// ensureCA reads the CA Secret, creating it once when it does not exist,
// and returns the CA that signs and what to trust (resources.CABundle). A
// CA Secret somebody broke is reported, not replaced: the clients trust
// it.
func (s *syncer) ensureCA(ctx context.Context, db *dbv1.Database) (pki.KeyPair, []byte, error) {
	name := resources.CASecretName(db)
	live, err := apply.Live(ctx, s.reader, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.Secret{})
	if err != nil {
		return pki.KeyPair{}, nil, fmt.Errorf("getting Secret %s: %w", name, err)
	}
	if live != nil {
		// a CA Secret somebody planted before the Database existed would
		// have every certificate issued by a key they hold
		if err := facet.OurSecret(db, live); err != nil {
			return pki.KeyPair{}, nil, err
		}
		ca := pki.KeyPair{Cert: live.Data[resources.CACertKey], Key: live.Data[resources.CAKeyKey]}
		if _, err := pki.ParseCertificate(ca.Cert); err != nil {
			return pki.KeyPair{}, nil, reconcile.TerminalError(fmt.Errorf("secret %s: %s: %w; delete it to get a new CA (clients must then take the new ca.crt)", name, resources.CACertKey, err))
		}
		return ca, resources.CABundle(live), nil
	}
	ca, err := pki.NewCA(caCommonName(db), s.now())
	if err != nil {
		return pki.KeyPair{}, nil, err
	}
	sec := resources.CASecret(db, ca.Cert, ca.Key)
	log.FromContext(ctx).Info("Creating CA Secret", "Secret", klog.KObj(sec))
	err = s.client.Create(ctx, sec, client.FieldOwner(facet.FieldOwner(Name)))
	if apierrors.IsAlreadyExists(err) {
		// Made by a reconcile the cache had not seen: read that one.
		return pki.KeyPair{}, nil, fmt.Errorf("creating Secret %s: it appeared meanwhile, reading it next time: %w", name, err)
	}
	if err != nil {
		return pki.KeyPair{}, nil, fmt.Errorf("creating Secret %s: %w", name, err)
	}
	return ca, resources.CABundle(sec), nil
}

// caCommonName is the subject of the Database's CA (and of the next one
// in a rotation).
func caCommonName(db *dbv1.Database) string {
	return fmt.Sprintf("%s.%s dbkeeper CA", db.Name, db.Namespace)
}

func (s *syncer) certLifetime() time.Duration {
	if s.lifetime > 0 {
		return s.lifetime
	}
	return pki.DefaultLifetime
}

// observeServer compares the certificate the server serves with the
// Secret's, asks the server to reload when they differ, and says so.
func (s *syncer) observeServer(ctx context.Context, db *dbv1.Database, eng engine.Engine, info certInfo) (facet.Outcome, error) {
	t := dbv1.ConditionTLSReady
	now := s.now()
	status := statusOf(db, info)
	renew := max(info.renewal.Sub(now), time.Second)
	secret := resources.TLSSecretName(db)
	if s.prober == nil {
		return facet.Outcome{Status: status, RequeueAfter: renew, Condition: conditions.True(t, dbv1.ReasonTLSReady, fmt.Sprintf(
			"Secret %s holds certificate %s; what the server serves is not checked (--tls-server-probe=false), so a renewed certificate is loaded when the server restarts",
			secret, info.serial))}, nil
	}
	pod, err := s.serverPod(ctx, db)
	if err != nil {
		return facet.Outcome{}, err
	}
	if pod == nil {
		return facet.Outcome{Status: status, RequeueAfter: renew, Condition: conditions.True(t, dbv1.ReasonTLSReady, fmt.Sprintf(
			"Secret %s holds certificate %s; no server runs to serve it yet", secret, info.serial))}, nil
	}
	addr := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(eng.Port())))
	served, err := s.prober.Served(ctx, addr)
	switch {
	case errors.Is(err, ErrNoTLS):
		return facet.Outcome{Status: status, RequeueAfter: reloadRecheck, Condition: conditions.False(t, dbv1.ReasonTLSIssuing, fmt.Sprintf(
			"Secret %s holds certificate %s; server %s does not offer TLS yet (it restarts with it, see StatefulSetReady)", secret, info.serial, pod.Name))}, nil
	case err != nil:
		// The certificate is in place and a restarted server loads it;
		// the operator may just not reach the pods (a NetworkPolicy).
		return facet.Outcome{Status: status, RequeueAfter: unreachableRecheck, Condition: conditions.True(t, dbv1.ReasonTLSReady, fmt.Sprintf(
			"Secret %s holds certificate %s; dbkeeper cannot tell what server %s serves, so it cannot reload it after a renewal: %s",
			secret, info.serial, pod.Name, conditions.Quote(err.Error(), 200)))}, nil
	}
	status.TLS.WithServedSerialNumber(pki.Serial(served))
	same := pki.Serial(served) == info.serial
	if info.raw != nil {
		same = bytes.Equal(served.Raw, info.raw)
	}
	if same {
		return facet.Outcome{Status: status, RequeueAfter: renew, Condition: conditions.True(t, dbv1.ReasonTLSReady, fmt.Sprintf(
			"server %s serves certificate %s of Secret %s", pod.Name, info.serial, secret))}, nil
	}
	// The kubelet may not have updated the mounted files yet; a reload
	// then loads the same files again, which is harmless.
	log.FromContext(ctx).Info("Reloading server configuration to load the renewed certificate", "Pod", klog.KObj(pod),
		"served", pki.Serial(served), "secret", info.serial)
	msg := fmt.Sprintf("server %s serves certificate %s; Secret %s holds %s, and dbkeeper asked the server to reload its configuration (no restart) to load it",
		pod.Name, pki.Serial(served), secret, info.serial)
	err = s.reload(ctx, db, pod, eng, info)
	if err != nil {
		msg = fmt.Sprintf("server %s serves certificate %s; Secret %s holds %s, and reloading the server's configuration failed: %s",
			pod.Name, pki.Serial(served), secret, info.serial, conditions.Quote(err.Error(), 200))
	} else {
		s.writer.Eventf(db, pod, corev1.EventTypeNormal, ReasonServerReloaded, "Reload",
			"Asked server %s to reload its configuration to load certificate %s", pod.Name, info.serial)
	}
	cond := conditions.True(t, dbv1.ReasonTLSReloading, msg)
	if !now.Before(served.NotAfter) {
		cond = conditions.False(t, dbv1.ReasonTLSReloading, msg+"; the served certificate has expired")
	}
	return facet.Outcome{Status: status, RequeueAfter: reloadRecheck, Condition: cond}, nil
}

// reload asks the server of pod to reload, verifying it with the CA of the
// certificate Secret (read now when info does not have it).
func (s *syncer) reload(ctx context.Context, db *dbv1.Database, pod *corev1.Pod, eng engine.Engine, info certInfo) error {
	ca := info.ca
	if ca == nil {
		name := resources.TLSSecretName(db)
		sec, err := apply.Live(ctx, s.reader, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.Secret{})
		if err != nil {
			return fmt.Errorf("getting Secret %s: %w", name, err)
		}
		if sec == nil {
			return fmt.Errorf("secret %s is gone", name)
		}
		ca = sec.Data[resources.CACertKey]
	}
	return s.reloader.Reload(ctx, db, pod.Status.PodIP, eng.Port(), ca)
}

// serverPod is the Database's first engine pod when it is ready and has an
// IP, or nil.
func (s *syncer) serverPod(ctx context.Context, db *dbv1.Database) (*corev1.Pod, error) {
	name := resources.StatefulSetName(db) + "-0"
	pod, err := apply.Live(ctx, s.client, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.Pod{})
	if err != nil {
		return nil, fmt.Errorf("getting Pod %s: %w", name, err)
	}
	if pod == nil || pod.Status.PodIP == "" || !pod.DeletionTimestamp.IsZero() || !instance.PodReady(pod) {
		return nil, nil
	}
	return pod, nil
}

// statusOf is status.tls of the Secret's certificate.
func statusOf(db *dbv1.Database, info certInfo) *dbv1ac.DatabaseStatusApplyConfiguration {
	return dbv1ac.DatabaseStatus().WithTLS(dbv1ac.TLSStatus().
		WithSecretName(resources.TLSSecretName(db)).
		WithNotAfter(metav1.NewTime(info.notAfter)).
		WithRenewalTime(metav1.NewTime(info.renewal)).
		WithSerialNumber(info.serial))
}

func (s *syncer) CurrentStatus(db *dbv1.Database) *dbv1ac.DatabaseStatusApplyConfiguration {
	st := db.Status.TLS
	if st == nil {
		return nil
	}
	ac := dbv1ac.TLSStatus().WithSecretName(st.SecretName).WithSerialNumber(st.SerialNumber).WithServedSerialNumber(st.ServedSerialNumber)
	if st.NotAfter != nil {
		ac.WithNotAfter(*st.NotAfter)
	}
	if st.RenewalTime != nil {
		ac.WithRenewalTime(*st.RenewalTime)
	}
	if r := st.CARotation; r != nil {
		ac.WithCARotation(caRotationApply(*r))
	}
	return dbv1ac.DatabaseStatus().WithTLS(ac)
}
