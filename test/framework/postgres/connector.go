package postgres

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
)

// Connector is an instance.Connector whose every Database's primary is
// s: a controller's SQL runs against the local server, as the login it
// asks for, in the database it names (postgres when empty), over plain
// TCP on 127.0.0.1.
func (s *Server) Connector() instance.Connector { return connector{s} }

type connector struct{ srv *Server }

func (c connector) Connect(ctx context.Context, _ *dbv1.Database, login instance.Login, database string) (instance.Conn, error) {
	if database == "" {
		database = "postgres"
	}
	conn, err := sqlconn.Connect(ctx, sqlconn.Target{Host: "127.0.0.1", Port: int32(c.srv.Port), User: login.User, Password: login.Password,
		Database: database, SSLMode: "disable"})
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// AppPrimary makes s the primary of db as the secret controller leaves
// it, for a controller's test against the local server: the application's
// role app (LOGIN) owning its database app. It returns the superuser
// Secret (s's superuser and password) and the generated credentials
// Secret (app) that the controllers read.
func (s *Server) AppPrimary(t testing.TB, db *dbv1.Database) []client.Object {
	t.Helper()
	super := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: resources.SuperuserSecretName(db)},
		Data: map[string][]byte{engine.UsernameKey: []byte(Superuser), engine.PasswordKey: []byte(s.Password)}}
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: resources.GeneratedSecretName(db)},
		Data: map[string][]byte{engine.UsernameKey: []byte("app"), engine.PasswordKey: []byte("app-password")}}
	s.SQL(t, "postgres", "CREATE ROLE app LOGIN")
	s.SQL(t, "postgres", "CREATE DATABASE app OWNER app")
	return []client.Object{super, creds}
}
