package resources

import (
	"crypto/sha256"
	"encoding/hex"

	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
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
