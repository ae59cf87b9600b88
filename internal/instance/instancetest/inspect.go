package instancetest

import (
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
)

// CanLogin says whether the server of db lets user in with password.
func (s *Servers) CanLogin(db *dbv1.Database, user, password string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	srv := s.servers[types.NamespacedName{Namespace: db.Namespace, Name: db.Name}]
	if srv == nil || srv.roles[user] == nil {
		return false
	}
	return engine.ScramVerifierMatches(srv.roles[user].verifier, password)
}

// Verifier is the stored verifier of user on the server of db ("" when
// none): tests look for it where it must not be.
func (s *Servers) Verifier(db *dbv1.Database, user string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	srv := s.servers[types.NamespacedName{Namespace: db.Namespace, Name: db.Name}]
	if srv == nil || srv.roles[user] == nil {
		return ""
	}
	return srv.roles[user].verifier
}

// Superuser says whether user is a superuser on the server of db, and
// whether it is the bootstrap one.
func (s *Servers) Superuser(db *dbv1.Database, user string) (super, bootstrap bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	srv := s.servers[types.NamespacedName{Namespace: db.Namespace, Name: db.Name}]
	if srv == nil || srv.roles[user] == nil {
		return false, false
	}
	return srv.roles[user].superuser, srv.bootstrap == user
}

// PasswordSets counts the ALTER ROLE … PASSWORD statements the server of
// db ran.
func (s *Servers) PasswordSets(db *dbv1.Database) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if srv := s.servers[types.NamespacedName{Namespace: db.Namespace, Name: db.Name}]; srv != nil {
		return srv.sets
	}
	return 0
}

// Reloads counts the SELECT pg_reload_conf() the server of db ran.
func (s *Servers) Reloads(db *dbv1.Database) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if srv := s.servers[types.NamespacedName{Namespace: db.Namespace, Name: db.Name}]; srv != nil {
		return srv.reloads
	}
	return 0
}

// Slots are the replication slots on the server of db, sorted.
func (s *Servers) Slots(db *dbv1.Database) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	if srv := s.servers[types.NamespacedName{Namespace: db.Namespace, Name: db.Name}]; srv != nil {
		for n := range srv.slots {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// SynchronousStandbyNames is synchronous_standby_names on the server of db
// as ALTER SYSTEM set it.
func (s *Servers) SynchronousStandbyNames(db *dbv1.Database) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if srv := s.servers[types.NamespacedName{Namespace: db.Namespace, Name: db.Name}]; srv != nil {
		return srv.syncNames
	}
	return ""
}

// Executes are the functions role was granted EXECUTE on, sorted.
func (s *Servers) Executes(db *dbv1.Database, role string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	if srv := s.servers[types.NamespacedName{Namespace: db.Namespace, Name: db.Name}]; srv != nil {
		for g := range srv.grants {
			if fn, ok := strings.CutPrefix(g, role+" "); ok {
				out = append(out, fn)
			}
		}
	}
	sort.Strings(out)
	return out
}
