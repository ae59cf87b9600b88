package dbtest

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
)

// PodTarget is a connection from the test process straight to one engine
// pod's IP, past every Service, as db's superuser (AsSuperuser), to
// database postgres, verifying the server's certificate for serverName
// (the pod's name under the headless Service) with the ca.crt of the
// credentials Secret when it has one. It reaches an instance whatever its
// role label says: a test asks each instance itself whether it takes
// writes.
func PodTarget(ctx context.Context, c client.Reader, db *dbv1.Database, pod *corev1.Pod, serverName string) (sqlconn.Target, error) {
	if pod.Status.PodIP == "" {
		return sqlconn.Target{}, fmt.Errorf("pod %s/%s has no IP", pod.Namespace, pod.Name)
	}
	t := sqlconn.Target{Host: pod.Status.PodIP, Port: engine.Postgres{}.Port(), SSLMode: "disable"}
	caSecret := resources.GeneratedSecretName(db)
	ca := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: caSecret}, ca); err != nil {
		return sqlconn.Target{}, fmt.Errorf("getting Secret %s: %w", caSecret, err)
	}
	if pem := ca.Data["ca.crt"]; len(pem) > 0 {
		cfg, err := pki.ClientConfig(pem, serverName)
		if err != nil {
			return sqlconn.Target{}, fmt.Errorf("Secret %s, ca.crt: %w", caSecret, err)
		}
		t.TLS = cfg
	}
	return AsSuperuser(ctx, c, db, t)
}

// AsSuperuser is target (a Service's or a pod's, with TLS set when the
// server has it) as db's superuser of Secret <name>-superuser, to database
// postgres: with the password, and where the server takes no superuser
// password over TCP (resources.ClientCertAuth) with a client certificate
// signed by the Database's CA, as the manager logs in.
func AsSuperuser(ctx context.Context, c client.Reader, db *dbv1.Database, target sqlconn.Target) (sqlconn.Target, error) {
	login, err := instance.SuperuserLogin(ctx, c, db)
	if err != nil {
		return sqlconn.Target{}, err
	}
	target.User, target.Password, target.Database = login.User, login.Password, "postgres"
	if target.TLS != nil {
		target.TLS = target.TLS.Clone()
		if err := instance.SuperuserCertificate(ctx, c, db, login, target.TLS); err != nil {
			return sqlconn.Target{}, err
		}
	}
	return target, nil
}

// ReadOnly reports whether err is PostgreSQL refusing a write because it
// is a hot standby (SQLSTATE 25006, read-only transaction).
func ReadOnly(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "25006"
}
