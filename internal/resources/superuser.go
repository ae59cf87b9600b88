package resources

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
)

// SuperuserSecretName is the name of the Secret of a Database's superuser
// (docs/design/roles-and-rotation.md, D1). The engine pod's initdb, the
// restore Job and the operator read it; no application is given it.
func SuperuserSecretName(db *dbv1.Database) string { return db.Name + "-superuser" }

// LegacySuperuserName is the superuser's name for a Database whose
// application's role is already named like the engine's superuser (a
// user's Secret with that username, from before issue 17).
const LegacySuperuserName = "dbkeeper"

// SuperuserName is the superuser role of a Database whose application's
// role is appRole: the engine's (postgres), unless the application's role
// already has that name.
func SuperuserName(eng engine.Engine, appRole string) string {
	if appRole == eng.Superuser() {
		return LegacySuperuserName
	}
	return eng.Superuser()
}

// SuperuserSecret is the superuser Secret dbkeeper generates, once, for
// every Database: username and password only (no uri: nothing should
// connect with it but dbkeeper's own work). Like the generated credentials
// Secret it is created, never applied, and has no owner reference: the
// cleanup controller deletes it by the deletion policy.
func SuperuserSecret(db *dbv1.Database, username, password string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      SuperuserSecretName(db),
			Namespace: db.Namespace,
			Labels:    Labels(db, ComponentSuperuser),
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			engine.UsernameKey: []byte(username),
			engine.PasswordKey: []byte(password),
		},
	}
}

// SuperuserSecretMetadata is what dbkeeper keeps applied on the superuser
// Secret after creating it: its labels, never data.
func SuperuserSecretMetadata(db *dbv1.Database) *corev1ac.SecretApplyConfiguration {
	return corev1ac.Secret(SuperuserSecretName(db), db.Namespace).
		WithLabels(Labels(db, ComponentSuperuser))
}
