package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agent"
	"github.com/dbkeeper/dbkeeper/internal/engine"
)

// ComponentTLS is the component label of a Database's TLS children: the
// CA Secret, the server certificate Secret and the authentication rules
// ConfigMap.
const ComponentTLS = "tls"

// Keys of the TLS Secrets. The server Secret is a kubernetes.io/tls Secret
// (corev1.TLSCertKey, corev1.TLSPrivateKeyKey) with the CA beside them, as
// cert-manager writes it.
const (
	CACertKey = "ca.crt"
	CAKeyKey  = "ca.key"
)

// TLSMountPath is where the engine container finds its certificate, key,
// CA and authentication rules; TLSCAMountPath is where backup and restore
// containers find the CA.
const (
	TLSMountPath      = "/etc/dbkeeper/tls"
	TLSCAMountPath    = "/etc/dbkeeper/tls-ca"
	AgentTLSMountPath = "/etc/dbkeeper/agent-tls"
	tlsVolume         = "tls"
	tlsCAVolume       = "tls-ca"
	// AgentTLSVolume is the engine pod's volume of the agent's own
	// certificate (addAgentTLS).
	AgentTLSVolume = "agent-tls"
	// tlsFileMode is readable by root (the kubelet owns the files) and
	// the pod's fsGroup, which PostgreSQL accepts for a root-owned key.
	tlsFileMode = 0o640
)

// AnnotationCASHA256 is the annotation of dbkeeper's CA and certificate
// Secrets holding the SHA-256 (hex) of their ca.crt: public, and in the
// metadata-only cache, so the controllers learn which CA a Secret holds
// without reading its data.
const AnnotationCASHA256 = "tls.dbkeeper.io/ca-sha256"

// AnnotationSerial is the annotation of dbkeeper's certificate Secret
// holding its certificate's serial number (hex, as status.tls shows it),
// so that a restarted manager knows which certificate a Secret holds from
// the metadata cache.
const AnnotationSerial = "tls.dbkeeper.io/serial"

// Keys of the CA Secret during a rotation of the CA (AnnotationRotateCA):
// the next CA while the old one still signs (phase Trusting), the
// previous CA's certificate once the new one signs (phase Serving).
const (
	CANextCertKey     = "next.crt"
	CANextKeyKey      = "next.key"
	CAPreviousCertKey = "previous.crt"
)

// Annotations of the CA Secret: the rotate-ca token of the last rotation
// (or the one on the Database when the CA was made, which needs none), its
// phase (a dbv1.CARotationPhase, which the data keys say too: the metadata
// cache holds annotations only) and when that phase began (RFC 3339).
const (
	AnnotationCARotation      = "tls.dbkeeper.io/ca-rotation"
	AnnotationCARotationPhase = "tls.dbkeeper.io/ca-rotation-phase"
	AnnotationCARotationSince = "tls.dbkeeper.io/ca-rotation-since"
)

// CABundle is what the Database's servers and clients trust (the ca.crt
// of the certificate Secret): the CA Secret's signing CA, and during a
// rotation the next or the previous CA after it.
func CABundle(sec *corev1.Secret) []byte {
	var b []byte
	for _, k := range []string{CACertKey, CANextCertKey, CAPreviousCertKey} {
		if c := sec.Data[k]; len(c) > 0 {
			b = append(b, c...)
			if c[len(c)-1] != '\n' {
				b = append(b, '\n')
			}
		}
	}
	return b
}

// AnnotationClientAuth, "true" on dbkeeper's certificate Secret, says its
// certificate authenticates a client too (the instances to each other);
// one without it was issued by an earlier dbkeeper and is read again.
const AnnotationClientAuth = "tls.dbkeeper.io/client-auth"

// CASHA256 is the value of AnnotationCASHA256 for the PEM CA certificate.
func CASHA256(caPEM []byte) string {
	sum := sha256.Sum256(caPEM)
	return hex.EncodeToString(sum[:])
}

// ServerTLS says whether a Database's server requires TLS on TCP
// connections; the builders of the pods that run or reach the server take
// it. TLSFor decides it.
type ServerTLS bool

// The two ServerTLS values.
const (
	TLSOff ServerTLS = false
	TLSOn  ServerTLS = true
)

// TLSState is why a Database's server does or does not use TLS.
type TLSState string

const (
	// TLSRequired: spec.tls.mode is Required, or unset on a Database whose
	// StatefulSet does not exist yet or already runs with TLS.
	TLSRequired TLSState = "Required"
	// TLSDisabled: spec.tls.mode is Disabled.
	TLSDisabled TLSState = "Disabled"
	// TLSPlaintextKept: spec.tls is unset and the StatefulSet was made
	// before dbkeeper had TLS: it keeps plaintext, so that an upgrade
	// neither restarts the server nor breaks clients without TLS.
	TLSPlaintextKept TLSState = "PlaintextKept"
)

// On is the ServerTLS of the state.
func (s TLSState) On() ServerTLS { return ServerTLS(s == TLSRequired) }

// TLSFor decides whether the Database's server uses TLS, from spec.tls and
// the live StatefulSet (nil when there is none): a spec.tls wins (Disabled
// turns TLS off, anything else asks for it); without one, a Database gets TLS unless its StatefulSet already runs
// without it (made before dbkeeper had TLS). Every controller that builds
// a pod reaching the server asks this, so they agree.
func TLSFor(db *dbv1.Database, live *appsv1.StatefulSet) TLSState {
	if db.Spec.TLS != nil {
		if db.Spec.TLS.Mode == dbv1.TLSModeDisabled {
			return TLSDisabled
		}
		return TLSRequired // Required, or an issuerRef: spec.tls asks for TLS
	}
	if live == nil || hasTLSVolume(live) {
		return TLSRequired
	}
	return TLSPlaintextKept
}

// PodServesTLS reports whether an engine pod was built with TLS (it
// mounts the server certificate): the server it runs requires TLS on TCP,
// and a client verifies it with the CA of TLSSecretName.
func PodServesTLS(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == tlsVolume })
}

// PodAgentServesTLS reports whether an engine pod's agent serves its
// endpoint over HTTPS with the certificate of TLSSecretName: with the
// server's TLS, or with its own mount when the server has none
// (addAgentTLS). A pod built before either serves plain HTTP.
func PodAgentServesTLS(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == tlsVolume || v.Name == AgentTLSVolume })
}

func hasTLSVolume(sts *appsv1.StatefulSet) bool {
	return slices.ContainsFunc(sts.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == tlsVolume })
}

// CASecretName is the Secret of the CA dbkeeper issues the Database's
// server certificates from.
func CASecretName(db *dbv1.Database) string { return db.Name + "-ca" }

// TLSSecretName is the kubernetes.io/tls Secret with the server
// certificate, its key and the CA certificate (from dbkeeper or
// cert-manager).
func TLSSecretName(db *dbv1.Database) string { return db.Name + "-tls" }

// HBAConfigMapName is the ConfigMap of the server's client authentication
// rules when TLS is on.
func HBAConfigMapName(db *dbv1.Database) string { return db.Name + "-hba" }

// CertificateName is the cert-manager Certificate of a Database whose
// spec.tls.issuerRef is set.
func CertificateName(db *dbv1.Database) string { return db.Name }

// ReadOnlyServiceName is the name of the read-only Service of the hot
// standbys (ReadOnlyService); the server certificate names it.
func ReadOnlyServiceName(db *dbv1.Database) string { return db.Name + "-ro" }

// ServerDNSNames are the host names the server certificate is valid for:
// every form of the client, headless and read-only Services'
// names, and each pod's name under the headless Service (which the
// restore Job connects to, see RestorePodHost), and with
// spec.backup.volumeRepository Enabled (as VolumeRepositoryFor resolves
// it) and no object store the Service of the repository on the backup
// volume (VolumeStore), whose S3 server serves it. The client Service's
// short name comes first (the certificate's common name).
func ServerDNSNames(db *dbv1.Database) []string {
	var names []string
	for _, svc := range []string{ClientServiceName(db), HeadlessServiceName(db), ReadOnlyServiceName(db)} {
		names = append(names, svc, svc+"."+db.Namespace, svc+"."+db.Namespace+".svc", svc+"."+db.Namespace+".svc.cluster.local")
	}
	pods := "*." + HeadlessServiceName(db) + "." + db.Namespace + ".svc"
	names = append(names, pods, pods+".cluster.local")
	if db.Spec.Backup.VolumeRepository == dbv1.VolumeRepositoryEnabled && db.Spec.Backup.ObjectStore == nil {
		repo := VolumeRepositoryName(db) + "." + db.Namespace + ".svc"
		names = append(names, repo, repo+".cluster.local")
	}
	return names
}

// CASecret is the Secret of the Database's CA, created once by the tls
// controller; its owner reference lets garbage collection take it with the
// Database (a new Database gets a new CA; the clients' ca.crt follows
// through the credentials Secret).
func CASecret(db *dbv1.Database, certPEM, keyPEM []byte) *corev1.Secret {
	annotations := map[string]string{AnnotationCASHA256: CASHA256(certPEM)}
	if token := db.Annotations[dbv1.AnnotationRotateCA]; token != "" {
		// a new CA needs no rotation for the token already there
		annotations[AnnotationCARotation] = token
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:            CASecretName(db),
			Namespace:       db.Namespace,
			Labels:          Labels(db, ComponentTLS),
			Annotations:     annotations,
			OwnerReferences: []metav1.OwnerReference{ownerReferenceOf(db)},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{CACertKey: certPEM, CAKeyKey: keyPEM},
	}
}

// TLSSecret is the server certificate Secret dbkeeper issues: tls.crt (of
// the given serial), tls.key and the CA's ca.crt, owned by the Database.
func TLSSecret(db *dbv1.Database, certPEM, keyPEM, caPEM []byte, serial string) *corev1ac.SecretApplyConfiguration {
	return corev1ac.Secret(TLSSecretName(db), db.Namespace).
		WithLabels(Labels(db, ComponentTLS)).
		WithAnnotations(map[string]string{AnnotationCASHA256: CASHA256(caPEM), AnnotationSerial: serial, AnnotationClientAuth: "true"}).
		WithOwnerReferences(OwnerReference(db)).
		WithType(corev1.SecretTypeTLS).
		WithData(map[string][]byte{
			corev1.TLSCertKey:       certPEM,
			corev1.TLSPrivateKeyKey: keyPEM,
			CACertKey:               caPEM,
		})
}

// HBAConfigMap holds the engine's client authentication rules that
// require TLS on TCP (engine.TLS.HostBasedAuth), owned by the Database.
func HBAConfigMap(db *dbv1.Database, eng engine.Engine) *corev1ac.ConfigMapApplyConfiguration {
	return corev1ac.ConfigMap(HBAConfigMapName(db), db.Namespace).
		WithLabels(Labels(db, ComponentTLS)).
		WithOwnerReferences(OwnerReference(db)).
		WithData(map[string]string{engine.PostgresHBAKey: eng.HostBasedAuth()})
}

// ReplicationClientSecretName is the kubernetes.io/tls Secret of the
// client certificate the instances of a Database with a cert-manager
// issuer present to each other as the replication role
// (ReplicationClientSecret).
func ReplicationClientSecretName(db *dbv1.Database) string { return db.Name + "-replication-tls" }

// ReplicationClientSecret holds the instances' client certificate for the
// replication role, signed by the Database's CA (<name>-ca) when a
// cert-manager issuer signs the server certificate; caPEM is that CA's
// bundle, whose hash it records with the certificate's renewal time, so
// that a converged Database reads no Secret (AnnotationCASHA256,
// AnnotationRenewal).
func ReplicationClientSecret(db *dbv1.Database, certPEM, keyPEM, caPEM []byte, renewal time.Time) *corev1ac.SecretApplyConfiguration {
	return corev1ac.Secret(ReplicationClientSecretName(db), db.Namespace).
		WithLabels(Labels(db, ComponentTLS)).
		WithAnnotations(map[string]string{AnnotationCASHA256: CASHA256(caPEM), AnnotationRenewal: renewal.UTC().Format(time.RFC3339)}).
		WithOwnerReferences(OwnerReference(db)).
		WithType(corev1.SecretTypeTLS).
		WithData(map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM})
}

// AnnotationRenewal, on ReplicationClientSecret, is when its certificate
// is renewed (RFC 3339).
const AnnotationRenewal = "tls.dbkeeper.io/renewal"

// addServerTLS mounts the server certificate, key and CA into the engine
// container at TLSMountPath (one projected volume, so a renewal swaps the
// certificate and key together) and starts the engine with TLS required.
// With a cert-manager issuer the volume holds the Database's own CA
// (agent.ClientCAFile) and the instances' client certificate
// (ReplicationClientSecret, agent.ClientCertFile and ClientKeyFile) too.
// The agent writes the authentication rules (agentEnv). It must run
// before the container is added to the pod.
func addServerTLS(db *dbv1.Database, eng engine.Engine, pod *corev1ac.PodSpecApplyConfiguration, c *corev1ac.ContainerApplyConfiguration) {
	sources := []*corev1ac.VolumeProjectionApplyConfiguration{
		corev1ac.VolumeProjection().WithSecret(corev1ac.SecretProjection().
			WithName(TLSSecretName(db)).
			WithItems(
				corev1ac.KeyToPath().WithKey(corev1.TLSCertKey).WithPath(corev1.TLSCertKey),
				corev1ac.KeyToPath().WithKey(corev1.TLSPrivateKeyKey).WithPath(corev1.TLSPrivateKeyKey),
				corev1ac.KeyToPath().WithKey(CACertKey).WithPath(CACertKey))),
	}
	if db.Spec.TLS != nil && db.Spec.TLS.IssuerRef != nil {
		sources = append(sources,
			corev1ac.VolumeProjection().WithSecret(corev1ac.SecretProjection().
				WithName(CASecretName(db)).
				WithItems(corev1ac.KeyToPath().WithKey(CACertKey).WithPath(agent.ClientCAFile))),
			corev1ac.VolumeProjection().WithSecret(corev1ac.SecretProjection().
				WithName(ReplicationClientSecretName(db)).
				WithItems(
					corev1ac.KeyToPath().WithKey(corev1.TLSCertKey).WithPath(agent.ClientCertFile),
					corev1ac.KeyToPath().WithKey(corev1.TLSPrivateKeyKey).WithPath(agent.ClientKeyFile))))
	}
	pod.WithVolumes(corev1ac.Volume().WithName(tlsVolume).WithProjected(corev1ac.ProjectedVolumeSource().
		WithDefaultMode(tlsFileMode).
		WithSources(sources...)))
	c.WithVolumeMounts(corev1ac.VolumeMount().WithName(tlsVolume).WithMountPath(TLSMountPath).WithReadOnly(true))
	c.WithArgs(eng.TLSArgs(TLSMountPath+"/"+corev1.TLSCertKey, TLSMountPath+"/"+corev1.TLSPrivateKeyKey, "")...)
}

// addAgentTLS mounts the Database's certificate (TLSSecretName, which the
// tls controller issues from the Database's CA whatever spec.tls.mode
// says) at AgentTLSMountPath for the agent's endpoint alone, when the
// server itself has no TLS: the agent's token and the manager's requests
// never travel in clear, while PostgreSQL stays as the user asked.
func addAgentTLS(db *dbv1.Database, pod *corev1ac.PodSpecApplyConfiguration, c *corev1ac.ContainerApplyConfiguration) {
	pod.WithVolumes(corev1ac.Volume().WithName(AgentTLSVolume).WithSecret(corev1ac.SecretVolumeSource().
		WithSecretName(TLSSecretName(db)).
		WithDefaultMode(tlsFileMode).
		WithItems(
			corev1ac.KeyToPath().WithKey(corev1.TLSCertKey).WithPath(corev1.TLSCertKey),
			corev1ac.KeyToPath().WithKey(corev1.TLSPrivateKeyKey).WithPath(corev1.TLSPrivateKeyKey),
			corev1ac.KeyToPath().WithKey(CACertKey).WithPath(CACertKey))))
	c.WithVolumeMounts(corev1ac.VolumeMount().WithName(AgentTLSVolume).WithMountPath(AgentTLSMountPath).WithReadOnly(true))
}

// addClientTLS mounts the CA of the Database's server certificate into a
// backup or restore container at TLSCAMountPath and makes its client verify
// the server with it. It must run before the container is added to the pod.
func addClientTLS(db *dbv1.Database, eng engine.Engine, pod *corev1ac.PodSpecApplyConfiguration, c *corev1ac.ContainerApplyConfiguration) {
	pod.WithVolumes(corev1ac.Volume().WithName(tlsCAVolume).WithSecret(corev1ac.SecretVolumeSource().
		WithSecretName(TLSSecretName(db)).
		WithDefaultMode(0o444).
		WithItems(corev1ac.KeyToPath().WithKey(CACertKey).WithPath(CACertKey))))
	c.WithVolumeMounts(corev1ac.VolumeMount().WithName(tlsCAVolume).WithMountPath(TLSCAMountPath).WithReadOnly(true))
	c.WithEnv(envApply(eng.ClientTLSEnv(TLSCAMountPath + "/" + CACertKey))...)
}

// ownerReferenceOf is OwnerReference as a metav1 value, for the children
// dbkeeper creates instead of applying.
func ownerReferenceOf(db *dbv1.Database) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         dbv1.GroupVersion.String(),
		Kind:               "Database",
		Name:               db.Name,
		UID:                db.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}

// CertificateGVK is cert-manager's Certificate kind, used unstructured so
// that dbkeeper needs no cert-manager Go module.
var CertificateGVK = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"}

// Certificate is the cert-manager Certificate of a Database whose
// spec.tls.issuerRef is set: cert-manager issues the server certificate
// for ServerDNSNames into TLSSecretName (which then carries the
// Database's labels, so dbkeeper's label-selected cache sees it) and
// renews it. It is nil without an issuerRef.
func Certificate(db *dbv1.Database) *unstructured.Unstructured {
	if db.Spec.TLS == nil || db.Spec.TLS.IssuerRef == nil {
		return nil
	}
	ref := db.Spec.TLS.IssuerRef
	kind, group := ref.Kind, ref.Group
	if kind == "" {
		kind = "Issuer"
	}
	if group == "" {
		group = CertificateGVK.Group
	}
	names := make([]any, 0, len(ServerDNSNames(db)))
	for _, n := range ServerDNSNames(db) {
		names = append(names, n)
	}
	labels := map[string]any{}
	for k, v := range Labels(db, ComponentTLS) {
		labels[k] = v
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"secretName":     TLSSecretName(db),
			"dnsNames":       names,
			"issuerRef":      map[string]any{"name": ref.Name, "kind": kind, "group": group},
			"privateKey":     map[string]any{"algorithm": "ECDSA", "size": int64(256), "rotationPolicy": "Always"},
			"usages":         []any{"server auth", "client auth", "digital signature"},
			"secretTemplate": map[string]any{"labels": labels},
		},
	}}
	u.SetGroupVersionKind(CertificateGVK)
	u.SetName(CertificateName(db))
	u.SetNamespace(db.Namespace)
	u.SetLabels(Labels(db, ComponentTLS))
	u.SetOwnerReferences([]metav1.OwnerReference{ownerReferenceOf(db)})
	return u
}
