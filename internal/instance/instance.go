// Package instance connects the manager to a Database's primary instance
// (status.replication.currentPrimary, pod <name>-0 before there is one)
// as a login, usually its superuser from <name>-superuser:
// what the secret controller needs to keep roles and passwords in line and
// what other controllers need to run SQL such as SELECT pg_reload_conf()
// (docs/design/roles-and-rotation.md, D2). It knows nothing of what the
// caller runs.
package instance

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
)

// ErrNotReady is the error of Connect when the instance's pod does not
// exist, is not Ready, or has no IP yet: retry later.
var ErrNotReady = errors.New("not ready")

// Login is who to connect as. It never appears in an error.
type Login struct {
	User     string
	Password string
	// Superuser: the server's superuser, which logs in over TCP with a
	// client certificate of the Database's CA, never its password, where
	// the server has TLS (SuperuserCertificate).
	Superuser bool
}

// Conn is one session with an instance.
type Conn interface {
	// Exec runs one statement and returns its NOTICEs.
	Exec(ctx context.Context, sql string) ([]string, error)
	// QueryValue runs a query of at most one row and column.
	QueryValue(ctx context.Context, sql string) (value *string, ok bool, err error)
	// Close ends the session.
	Close(ctx context.Context) error
}

// Connector connects to a Database's first instance.
type Connector interface {
	// Connect opens a session with the primary of db (PrimaryName) as
	// login, in database
	// (the engine's maintenance database when empty). An instance that
	// cannot be reached yet is an error wrapping ErrNotReady.
	Connect(ctx context.Context, db *dbv1.Database, login Login, database string) (Conn, error)
}

// SSLMode is the libpq sslmode of a connection to a server without TLS
// (its pod mounts no certificate: a Database with spec.tls.mode Disabled,
// or one that kept plaintext when dbkeeper gained TLS). A server with TLS
// is verified as verify-full: its CA, its pod's DNS name.
const SSLMode = "prefer"

// maintenanceDatabase is the database a session opens when the caller
// names none: initdb's, which always exists.
const maintenanceDatabase = "postgres"

// Pods is the Connector of a running manager: it reads the primary's pod
// (PrimaryName) from
// Pods (the manager's cache, which holds dbkeeper's labelled pods) and
// connects to its IP with sqlconn, verifying a server with TLS with the CA
// of the Database's TLS Secret, read with Secrets.
type Pods struct {
	Pods client.Reader
	// Secrets reads the TLS Secret's ca.crt from the API server (the
	// cache holds only Secrets' metadata).
	Secrets client.Reader
}

// Connect implements Connector.
func (p Pods) Connect(ctx context.Context, db *dbv1.Database, login Login, database string) (Conn, error) {
	eng, err := engine.For(db.Spec.Engine)
	if err != nil {
		return nil, err
	}
	name := PrimaryName(db)
	pod, err := apply.Live(ctx, p.Pods, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.Pod{})
	if err != nil {
		return nil, fmt.Errorf("getting pod %s: %w", name, err)
	}
	switch {
	case pod == nil:
		return nil, fmt.Errorf("pod %s does not exist: %w", name, ErrNotReady)
	case !pod.DeletionTimestamp.IsZero():
		return nil, fmt.Errorf("pod %s is terminating: %w", name, ErrNotReady)
	case !PodReady(pod):
		return nil, fmt.Errorf("pod %s is %w", name, ErrNotReady)
	case pod.Status.PodIP == "":
		return nil, fmt.Errorf("pod %s has no IP: %w", name, ErrNotReady)
	}
	if database == "" {
		database = maintenanceDatabase
	}
	target := sqlconn.Target{
		Host: pod.Status.PodIP, Port: eng.Port(),
		User: login.User, Password: login.Password, Database: database,
		SSLMode: SSLMode,
	}
	if resources.PodServesTLS(pod) {
		if target.TLS, err = caConfig(ctx, p.Secrets, db, PodHost(db, name)); err != nil {
			return nil, err
		}
		if err := SuperuserCertificate(ctx, p.Secrets, db, login, target.TLS); err != nil {
			return nil, err
		}
	}
	c, err := sqlconn.Connect(ctx, target)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", name, err)
	}
	return c, nil
}

// PrimaryName is the instance (pod) of db that takes writes: the current
// primary of status.replication, or instance 0 before the replication
// controller has recorded one.
func PrimaryName(db *dbv1.Database) string {
	if r := db.Status.Replication; r != nil && r.CurrentPrimary != "" {
		return r.CurrentPrimary
	}
	return resources.InstanceName(db, 0)
}

// PodReady reports whether the pod's Ready condition is True.
func PodReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// SuperuserLogin reads the superuser's login of db from <name>-superuser
// with reader, which must read from the API server (the manager's cache
// never holds Secret data). A missing Secret or key is an error naming
// them.
func SuperuserLogin(ctx context.Context, reader client.Reader, db *dbv1.Database) (Login, error) {
	name := resources.SuperuserSecretName(db)
	sec := &corev1.Secret{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, sec); err != nil {
		return Login{}, fmt.Errorf("getting Secret %s: %w", name, err)
	}
	login := Login{User: string(sec.Data[engine.UsernameKey]), Password: string(sec.Data[engine.PasswordKey]), Superuser: true}
	if login.User == "" || login.Password == "" {
		return Login{}, fmt.Errorf("Secret %s lacks the key %s or %s", name, engine.UsernameKey, engine.PasswordKey)
	}
	return login, nil
}

// Application is the application's role and database of db, from its
// credentials Secret read with reader (which must read from the API
// server); a Secret that is not there is an error apierrors.IsNotFound
// tells, a Secret without the role gives "".
func Application(ctx context.Context, reader client.Reader, db *dbv1.Database) (role, database string, err error) {
	name := resources.CredentialsSecretName(db)
	sec := &corev1.Secret{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, sec); err != nil {
		return "", "", fmt.Errorf("getting Secret %s: %w", name, err)
	}
	return string(sec.Data[engine.UsernameKey]), engine.AppDatabase(sec.Data), nil
}

// ConnectAsSuperuser opens a session with the primary of db as its
// superuser (SuperuserLogin with reader), in database.
func ConnectAsSuperuser(ctx context.Context, c Connector, reader client.Reader, db *dbv1.Database, database string) (Conn, error) {
	login, err := SuperuserLogin(ctx, reader, db)
	if err != nil {
		return nil, err
	}
	return c.Connect(ctx, db, login, database)
}

// ReachabilityChanged lets through the updates of an engine pod that can
// change whether its server is reached (it turned Ready or not Ready, or
// got another IP): when a controller that connects to the server should
// look again.
func ReachabilityChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, okOld := e.ObjectOld.(*corev1.Pod)
			updated, okNew := e.ObjectNew.(*corev1.Pod)
			if !okOld || !okNew {
				return true
			}
			return old.Status.PodIP != updated.Status.PodIP || PodReady(old) != PodReady(updated)
		},
		DeleteFunc: func(event.DeleteEvent) bool { return false },
	}
}

// Unreachable says whether err is trouble reaching or writing the
// primary, which a later attempt may not have: sqlconn.Unreachable,
// ErrNotReady, or a server that turned read-only (demoted by a
// switchover).
func Unreachable(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == "25006" {
		return true
	}
	return errors.Is(err, ErrNotReady) || sqlconn.Unreachable(err)
}

// ServerError is the server's message of err with its detail (the
// sessions of a database, the objects that depend on another) and
// SQLSTATE, never the statement; err's text when it is not the server's.
func ServerError(err error) string {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) {
		return err.Error()
	}
	msg := pg.Message
	if pg.Detail != "" {
		msg += " (" + pg.Detail + ")"
	}
	return msg + " [SQLSTATE " + pg.Code + "]"
}
