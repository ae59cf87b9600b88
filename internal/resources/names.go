// Package resources builds the desired children of a Database as pure
// functions: no client, no clock, no randomness. Controllers fetch, compare,
// apply and report; everything about what a child looks like lives here.
package resources

import (
	"fmt"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// The component label values, one per kind of child.
const (
	ComponentDatabase    = "database"
	ComponentCredentials = "credentials"
	// ComponentSuperuser is the superuser Secret's (issue 17), never given
	// to applications.
	ComponentSuperuser = "superuser"
	ComponentBackup    = "backup"
)

// The well-known labels every child carries.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelComponent = "app.kubernetes.io/component"

	// ManagedBy is the value of LabelManagedBy on every child; the
	// operator's cache selects on it.
	ManagedBy = "dbkeeper"
)

// DataVolumeName is the name of the StatefulSet's volume claim template; the
// data PVCs are named <DataVolumeName>-<database>-<ordinal>.
const DataVolumeName = "data"

// StatefulSetName is the name of the engine's StatefulSet and its pods' prefix.
func StatefulSetName(db *dbv1.Database) string { return db.Name }

// ClientServiceName is the name of the Service clients connect to.
func ClientServiceName(db *dbv1.Database) string { return db.Name }

// ClientServiceHost is the in-cluster DNS name of the client Service.
func ClientServiceHost(db *dbv1.Database) string {
	return ClientServiceName(db) + "." + db.Namespace + ".svc"
}

// HeadlessServiceName is the name of the StatefulSet's governing Service.
func HeadlessServiceName(db *dbv1.Database) string { return db.Name + "-headless" }

// GeneratedSecretName is the name of the Secret dbkeeper generates.
func GeneratedSecretName(db *dbv1.Database) string { return db.Name + GeneratedSecretSuffix }

// GeneratedSecretSuffix ends the name of every generated credentials
// Secret.
const GeneratedSecretSuffix = "-credentials"

// CredentialsSecretName is the Secret the Database uses: the user's, when
// spec.credentials.secretName names one, else the generated one.
func CredentialsSecretName(db *dbv1.Database) string {
	if UserSecret(db) {
		return db.Spec.Credentials.SecretName
	}
	return GeneratedSecretName(db)
}

// UserSecret reports whether the Database names its own credentials Secret.
func UserSecret(db *dbv1.Database) bool {
	return db.Spec.Credentials != nil && db.Spec.Credentials.SecretName != ""
}

// BackupName is the name of the backup CronJob and of the backup PVC.
func BackupName(db *dbv1.Database) string { return db.Name + "-backup" }

// Endpoint is the in-cluster host:port of the client Service.
func Endpoint(db *dbv1.Database, port int32) string {
	return fmt.Sprintf("%s:%d", ClientServiceHost(db), port)
}

// Labels are the labels of a child of the given component.
func Labels(db *dbv1.Database, component string) map[string]string {
	l := SelectorLabels(db)
	l[LabelManagedBy] = ManagedBy
	l[LabelComponent] = component
	return l
}

// SelectorLabels select every child of one Database (and, with the database
// component, its pods).
func SelectorLabels(db *dbv1.Database) map[string]string {
	return map[string]string{
		LabelName:     string(db.Spec.Engine),
		LabelInstance: db.Name,
	}
}

// PodSelectorLabels select the engine pods of a Database.
func PodSelectorLabels(db *dbv1.Database) map[string]string {
	l := SelectorLabels(db)
	l[LabelComponent] = ComponentDatabase
	return l
}

// ReplicationSecretName is the Secret of the replication role's password
// (agentapi.ReplicationUser) and of the agents' bearer token; the secret
// controller creates it, the engine pods and the replication controller
// read it.
func ReplicationSecretName(db *dbv1.Database) string { return db.Name + "-replication" }

// Keys of the replication Secret.
const (
	ReplicationPasswordKey = "password"
	AgentTokenKey          = "agent-token"
)

// InstanceName is the name of the engine pod with the ordinal.
func InstanceName(db *dbv1.Database, ordinal int) string {
	return fmt.Sprintf("%s-%d", StatefulSetName(db), ordinal)
}

// ReadOnlyServiceHost is the in-cluster DNS name of the read-only Service.
func ReadOnlyServiceHost(db *dbv1.Database) string {
	return ReadOnlyServiceName(db) + "." + db.Namespace + ".svc"
}

// LeaseName names the Database's primary Lease: only its holder's instance
// runs as a primary (internal/agent).
func LeaseName(db *dbv1.Database) string { return db.Name + "-primary" }

// InstanceServiceAccountName names the ServiceAccount of the engine pods:
// its Role lets the agents get and update the primary Lease, nothing else.
func InstanceServiceAccountName(db *dbv1.Database) string { return db.Name + "-instance" }
