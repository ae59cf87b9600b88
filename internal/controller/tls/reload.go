package tls

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/pki"
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

// SuperuserReloader reloads as the superuser of Secret <name>-superuser
// (instance.SuperuserLogin) through internal/sqlconn, verifying the server
// with the CA for pod 0's DNS name.
type SuperuserReloader struct {
	// Reader reads Secrets from the API server (the cache holds none).
	Reader client.Reader
}

// Reload implements Reloader.
func (r SuperuserReloader) Reload(ctx context.Context, db *dbv1.Database, host string, port int32, ca []byte) error {
	login, err := instance.SuperuserLogin(ctx, r.Reader, db)
	if err != nil {
		return err
	}
	cfg, err := pki.ClientConfig(ca, resources.RestorePodHost(db))
	if err != nil {
		return fmt.Errorf("Secret %s: %w", resources.TLSSecretName(db), err)
	}
	if err := instance.SuperuserCertificate(ctx, r.Reader, db, login, cfg); err != nil {
		return err
	}
	conn, err := sqlconn.Connect(ctx, sqlconn.Target{
		Host: host, Port: port, User: login.User, Password: login.Password, Database: "postgres", TLS: cfg,
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
