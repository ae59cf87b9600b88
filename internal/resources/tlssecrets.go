package resources

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
)

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
