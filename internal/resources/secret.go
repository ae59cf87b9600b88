package resources

import (
	"net/url"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
)

// GeneratedUsername is the user (and database) of a generated Secret.
const GeneratedUsername = "app"

// Keys a generated Secret holds besides username, password and database
// (engine.UsernameKey, engine.PasswordKey, engine.DatabaseKey), for clients.
const (
	HostKey = "host"
	PortKey = "port"
	URIKey  = "uri"
	// ReadOnlyHostKey and ReadOnlyURIKey are host and uri for the
	// read-only Service (<name>-ro), which reaches the ready hot standbys:
	// for reads that may lag the primary a little.
	ReadOnlyHostKey = "ro-host"
	ReadOnlyURIKey  = "ro-uri"
	// CAKey is the CA certificate that verifies the server (ca.crt, as in
	// the server's kubernetes.io/tls Secret), present when the server
	// requires TLS; the uri then says sslmode=verify-full, and clients
	// point sslrootcert (PGSSLROOTCERT) at a file with this key's value.
	CAKey = CACertKey
)

// CredentialsSecret is the Secret dbkeeper generates, once, for a Database
// without spec.credentials.secretName. It is created, never applied, so a
// later reconcile can never overwrite the password. It carries no owner
// reference: the password of data a deletion policy keeps must not be
// garbage collected, whatever the deletion propagation; the cleanup
// controller deletes it when the policy says so. With tls on, the uris ask
// for sslmode=verify-full and the CA becomes the ca.crt key (the server
// certificate names the read-only Service too).
func CredentialsSecret(db *dbv1.Database, eng engine.Engine, password string, tls ClientTLS) *corev1.Secret {
	host := ClientServiceHost(db)
	roHost := ReadOnlyServiceHost(db)
	port := strconv.Itoa(int(eng.Port()))
	uri := func(host string) string {
		u := url.URL{
			Scheme: string(eng.Name()),
			User:   url.UserPassword(GeneratedUsername, password),
			Host:   host + ":" + port,
			Path:   "/" + GeneratedUsername,
		}
		if tls.On {
			u.RawQuery = "sslmode=verify-full"
		}
		return u.String()
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      GeneratedSecretName(db),
			Namespace: db.Namespace,
			Labels:    Labels(db, ComponentCredentials),
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			engine.UsernameKey: []byte(GeneratedUsername),
			engine.PasswordKey: []byte(password),
			engine.DatabaseKey: []byte(GeneratedUsername),
			HostKey:            []byte(host),
			PortKey:            []byte(port),
			URIKey:             []byte(uri(host)),
			ReadOnlyHostKey:    []byte(roHost),
			ReadOnlyURIKey:     []byte(uri(roHost)),
		},
	}
	if tls.On && len(tls.CA) > 0 {
		sec.Data[CAKey] = tls.CA
	}
	return sec
}

// CredentialsDrift returns the keys of a generated Secret's data that are
// derived from the Database and the Secret's own password (username,
// database, host, port, uri, ro-host, ro-uri, ca.crt; see CredentialsSecret
// for tls; a Secret made before the read-only Service gains its keys so) and
// differ from what they should be, with the values they should have; a nil
// value is a key to remove (ca.crt of a server without TLS). The password
// itself is never among them: it is the one key dbkeeper cannot derive.
func CredentialsDrift(db *dbv1.Database, eng engine.Engine, data map[string][]byte, tls ClientTLS) map[string][]byte {
	want := CredentialsSecret(db, eng, string(data[engine.PasswordKey]), tls).Data
	drift := map[string][]byte{}
	for k, v := range want {
		if k != engine.PasswordKey && string(data[k]) != string(v) {
			drift[k] = v
		}
	}
	if _, ok := want[CAKey]; !ok && data[CAKey] != nil {
		drift[CAKey] = nil
	}
	return drift
}

// ClientTLS is what a generated credentials Secret tells clients about the
// server's TLS.
type ClientTLS struct {
	// On says the server requires TLS (see TLSFor).
	On ServerTLS
	// CA is the PEM certificate of the CA that verifies the server: the
	// ca.crt of its TLS Secret, nil until that exists.
	CA []byte
}

// CredentialsSecretMetadata is what dbkeeper keeps applied on a generated
// Secret after creating it: its labels, never data (so an adopted Secret,
// for example one kept by the Retain policy, keeps its password) and no
// owner reference (see CredentialsSecret).
func CredentialsSecretMetadata(db *dbv1.Database) *corev1ac.SecretApplyConfiguration {
	return corev1ac.Secret(GeneratedSecretName(db), db.Namespace).
		WithLabels(Labels(db, ComponentCredentials))
}
