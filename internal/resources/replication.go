package resources

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// ComponentReplication is the component label of the replication Secret.
const ComponentReplication = "replication"

// ReplicationSecret is the Secret of the replication role's password and
// of the agents' bearer token (ReplicationSecretName), which the secret
// controller creates once, never applies (a later reconcile must never
// change a password the servers already have), and never regenerates while
// it exists. Unlike the credentials Secrets it is owned by the Database:
// nothing outside the Database's own pods uses it, so it goes with them.
func ReplicationSecret(db *dbv1.Database, password, token string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:            ReplicationSecretName(db),
			Namespace:       db.Namespace,
			Labels:          Labels(db, ComponentReplication),
			OwnerReferences: []metav1.OwnerReference{ownerReferenceOf(db)},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			ReplicationPasswordKey: []byte(password),
			AgentTokenKey:          []byte(token),
		},
	}
}

// ReplicationSecretMetadata is what dbkeeper keeps applied on the
// replication Secret after creating it: its labels and owner reference,
// never data.
func ReplicationSecretMetadata(db *dbv1.Database) *corev1ac.SecretApplyConfiguration {
	return corev1ac.Secret(ReplicationSecretName(db), db.Namespace).
		WithLabels(Labels(db, ComponentReplication)).
		WithOwnerReferences(OwnerReference(db))
}
