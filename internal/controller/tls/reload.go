package tls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
)

// Reloader makes a Database's server load its certificate files again
// without a restart (PostgreSQL: SELECT pg_reload_conf(), which needs the
// superuser).
type Reloader interface {
	// Reload asks the server of db at host:port (pod 0's IP and the
	// engine's port) to reload its configuration. ca verifies the server's
	// certificate (for the pod's host name under the headless Service).
	Reload(ctx context.Context, db *dbv1.Database, host string, port int32, ca []byte) error
}

// SuperuserReloader reloads as the superuser through internal/sqlconn,
// with the credentials of Secret <name>-superuser (issue 17's roles work
// makes it). Until that exists, the credentials Secret is the bootstrap
// superuser of every Database dbkeeper made, and is used instead. It is
// the seam for the roles branch's "connect to instance 0 as superuser".
type SuperuserReloader struct {
	// Reader reads Secrets from the API server (the cache holds none).
	Reader client.Reader
}

// Reload implements Reloader.
func (r SuperuserReloader) Reload(ctx context.Context, db *dbv1.Database, host string, port int32, ca []byte) error {
	user, password, err := r.login(ctx, db)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return errors.New("the TLS Secret's ca.crt holds no certificate")
	}
	conn, err := sqlconn.Connect(ctx, sqlconn.Target{
		Host: host, Port: port, User: user, Password: password, Database: "postgres",
		TLS: &tls.Config{RootCAs: roots, ServerName: resources.RestorePodHost(db), MinVersion: tls.VersionTLS12},
	})
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, _, err := conn.QueryValue(ctx, "SELECT pg_catalog.pg_reload_conf()::text"); err != nil {
		return fmt.Errorf("reloading the configuration: %w", err)
	}
	return nil
}

// login is the superuser's name and password.
func (r SuperuserReloader) login(ctx context.Context, db *dbv1.Database) (string, string, error) {
	for _, name := range []string{resources.SuperuserSecretName(db), resources.CredentialsSecretName(db)} {
		sec, err := apply.Live(ctx, r.Reader, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.Secret{})
		if err != nil {
			return "", "", fmt.Errorf("getting Secret %s: %w", name, err)
		}
		if sec != nil && len(sec.Data[engine.UsernameKey]) > 0 && len(sec.Data[engine.PasswordKey]) > 0 {
			return string(sec.Data[engine.UsernameKey]), string(sec.Data[engine.PasswordKey]), nil
		}
	}
	return "", "", fmt.Errorf("no superuser credentials: neither Secret %s nor %s holds a username and a password",
		resources.SuperuserSecretName(db), resources.CredentialsSecretName(db))
}
