package dbtest

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
)

// PodTarget is a connection from the test process straight to one engine
// pod's IP, past every Service, as the superuser of Secret superuser (its
// username and password keys), to database postgres, verifying the
// server's certificate for serverName (the pod's name under the headless
// Service) with the ca.crt of Secret caSecret when it has one. It reaches
// an instance whatever its role label says: a test asks each instance
// itself whether it takes writes.
func PodTarget(ctx context.Context, c client.Reader, pod *corev1.Pod, superuser, caSecret, serverName string) (sqlconn.Target, error) {
	if pod.Status.PodIP == "" {
		return sqlconn.Target{}, fmt.Errorf("pod %s/%s has no IP", pod.Namespace, pod.Name)
	}
	sec := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: superuser}, sec); err != nil {
		return sqlconn.Target{}, fmt.Errorf("getting Secret %s: %w", superuser, err)
	}
	t := sqlconn.Target{
		Host: pod.Status.PodIP, Port: engine.Postgres{}.Port(),
		User: string(sec.Data[engine.UsernameKey]), Password: string(sec.Data[engine.PasswordKey]),
		Database: "postgres", SSLMode: "disable",
	}
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
	return t, nil
}

// ReadOnly reports whether err is PostgreSQL refusing a write because it
// is a hot standby (SQLSTATE 25006, read-only transaction).
func ReadOnly(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "25006"
}
