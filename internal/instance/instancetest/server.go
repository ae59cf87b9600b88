// Package instancetest is an in-memory stand-in for the PostgreSQL servers
// of Databases, for the tests that run no server (unit tests, envtest,
// kwok): it understands the statements of engine.Postgres's RoleSQL and
// LegacyRoles well enough to log in with SCRAM verifiers, keep roles,
// their passwords and databases, and tell which role is the bootstrap
// superuser. Its first login to a Database's server plays initdb: that
// login becomes the bootstrap superuser.
package instancetest

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
	"k8s.io/apimachinery/pkg/types"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// Servers is an instance.Connector to in-memory servers, one per Database.
type Servers struct {
	mu      sync.Mutex
	servers map[types.NamespacedName]*server
	// down holds the Databases whose instance is not ready.
	down map[types.NamespacedName]bool
}

type role struct {
	verifier  string
	superuser bool
}

type server struct {
	bootstrap string
	roles     map[string]*role
	databases map[string]string // name → owner
	sets      int
	reloads   int
	// slots are the physical replication slots, by name.
	slots map[string]bool
	// syncNames is synchronous_standby_names (ALTER SYSTEM).
	syncNames string
	// grants are the EXECUTE grants on functions, as "role function".
	grants map[string]bool
}

// New returns Servers with no server yet.
func New() *Servers {
	return &Servers{servers: map[types.NamespacedName]*server{}, down: map[types.NamespacedName]bool{}}
}

var _ instance.Connector = (*Servers)(nil)

// Connect implements instance.Connector.
func (s *Servers) Connect(_ context.Context, db *dbv1.Database, login instance.Login, _ string) (instance.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := types.NamespacedName{Namespace: db.Namespace, Name: db.Name}
	if s.down[key] {
		return nil, fmt.Errorf("pod %s-0 is %w", db.Name, instance.ErrNotReady)
	}
	srv := s.servers[key]
	if srv == nil {
		// initdb, with the first login as the bootstrap superuser.
		v, err := engine.ScramVerifier(login.Password)
		if err != nil {
			return nil, err
		}
		srv = &server{bootstrap: login.User, roles: map[string]*role{login.User: {verifier: v, superuser: true}},
			databases: map[string]string{"postgres": login.User}}
		s.servers[key] = srv
	}
	r := srv.roles[login.User]
	if r == nil || r.verifier == "" || !engine.ScramVerifierMatches(r.verifier, login.Password) {
		return nil, &pgconn.PgError{Severity: "FATAL", Code: "28P01", Message: fmt.Sprintf("password authentication failed for user %q", login.User)}
	}
	return &conn{s: s, srv: srv, user: login.User}, nil
}

// Legacy makes the server of db one that the image made before issue 17:
// role, with password, is the bootstrap superuser and owns database.
func (s *Servers) Legacy(db *dbv1.Database, roleName, password, database string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := engine.ScramVerifier(password)
	if err != nil {
		panic(err)
	}
	s.servers[types.NamespacedName{Namespace: db.Namespace, Name: db.Name}] = &server{bootstrap: roleName,
		roles: map[string]*role{roleName: {verifier: v, superuser: true}}, databases: map[string]string{"postgres": roleName, database: roleName}}
}

// SetReady makes the instance of db reachable or not.
func (s *Servers) SetReady(db *dbv1.Database, ready bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down[types.NamespacedName{Namespace: db.Namespace, Name: db.Name}] = !ready
}
