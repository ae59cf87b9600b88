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
	"regexp"
	"sort"
	"strings"
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

type conn struct {
	s    *Servers
	srv  *server
	user string
}

var (
	storedRE   = regexp.MustCompile(`^SELECT rolpassword FROM pg_catalog\.pg_authid WHERE rolname = '(.*)'$`)
	dbExistsRE = regexp.MustCompile(`^SELECT 1 FROM pg_catalog\.pg_database WHERE datname = '(.*)'$`)
	setRE      = regexp.MustCompile(`^ALTER ROLE "(.*)" PASSWORD '(.*)'$`)
	createDBRE = regexp.MustCompile(`^CREATE DATABASE "(.*)" OWNER "(.*)"$`)
	ownerRE    = regexp.MustCompile(`^ALTER DATABASE "(.*)" OWNER TO "(.*)"$`)
	doRoleRE   = regexp.MustCompile(`r name := ''(.*?)'';`)
	doLegacyRE = regexp.MustCompile(`legacy name := ''(.*?)'';`)
	createRE   = regexp.MustCompile(`^CREATE ROLE "(.*)" WITH LOGIN REPLICATION PASSWORD '(.*)'$`)
	slotsRE    = regexp.MustCompile(`^SELECT .* FROM pg_catalog\.pg_replication_slots WHERE slot_name LIKE 'dbkeeper\\_%'$`)
	addSlotRE  = regexp.MustCompile(`^SELECT pg_catalog\.pg_create_physical_replication_slot\('(.*)', true\)$`)
	dropSlotRE = regexp.MustCompile(`^SELECT pg_catalog\.pg_drop_replication_slot\('(.*)'\)$`)
	syncSetRE  = regexp.MustCompile(`^ALTER SYSTEM SET synchronous_standby_names = '(.*)'$`)
	grantFnRE  = regexp.MustCompile(`^GRANT EXECUTE ON FUNCTION (.*) TO "(.*)"$`)
)

func (c *conn) Close(context.Context) error { return nil }

func (c *conn) QueryValue(_ context.Context, sql string) (*string, bool, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if strings.TrimSuffix(strings.TrimSpace(sql), ";") == "SELECT pg_reload_conf()" || strings.TrimSuffix(strings.TrimSpace(sql), ";") == "SELECT pg_catalog.pg_reload_conf()" {
		c.srv.reloads++
		t := "t"
		return &t, true, nil
	}
	if sql == "SHOW synchronous_standby_names" {
		v := c.srv.syncNames
		return &v, true, nil
	}
	if sql == (engine.Postgres{}).BootstrapSuperuser() {
		return &c.srv.bootstrap, true, nil
	}
	if m := storedRE.FindStringSubmatch(sql); m != nil {
		r := c.srv.roles[m[1]]
		if r == nil {
			return nil, false, nil
		}
		if r.verifier == "" {
			return nil, true, nil
		}
		v := r.verifier
		return &v, true, nil
	}
	if m := dbExistsRE.FindStringSubmatch(sql); m != nil {
		if _, ok := c.srv.databases[m[1]]; ok {
			one := "1"
			return &one, true, nil
		}
		return nil, false, nil
	}
	if slotsRE.MatchString(sql) {
		var names []string
		for n := range c.srv.slots {
			names = append(names, n+"=false")
		}
		sort.Strings(names)
		v := strings.Join(names, ",")
		return &v, true, nil
	}
	return nil, false, &pgconn.PgError{Severity: "ERROR", Code: "0A000", Message: "instancetest: query not understood"}
}

func (c *conn) Exec(_ context.Context, sql string) ([]string, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	srv := c.srv
	switch {
	case sql == "SET synchronous_commit TO local":
		// a session setting: the controller's own commits wait for no
		// standby
		return nil, nil
	case sql == "BEGIN" || sql == "COMMIT" || sql == "ROLLBACK" || sql == (engine.Postgres{}).Unlogged():
		// the transaction around a password change and its logging
		// settings (roles.ExecUnlogged): this server writes no log, and
		// applies each statement at once (a ROLLBACK undoes nothing; no
		// test fails a statement inside one)
		return nil, nil
	case setRE.MatchString(sql):
		m := setRE.FindStringSubmatch(sql)
		r := srv.roles[m[1]]
		if r == nil {
			return nil, &pgconn.PgError{Severity: "ERROR", Code: "42704", Message: fmt.Sprintf("role %q does not exist", m[1])}
		}
		r.verifier = m[2]
		srv.sets++
		return nil, nil
	case createRE.MatchString(sql):
		m := createRE.FindStringSubmatch(sql)
		if srv.roles[m[1]] != nil {
			return nil, &pgconn.PgError{Severity: "ERROR", Code: "42710", Message: fmt.Sprintf("role %q already exists", m[1])}
		}
		srv.roles[m[1]] = &role{verifier: m[2]}
		return nil, nil
	case addSlotRE.MatchString(sql):
		m := addSlotRE.FindStringSubmatch(sql)
		if srv.slots[m[1]] {
			return nil, &pgconn.PgError{Severity: "ERROR", Code: "42710", Message: fmt.Sprintf("replication slot %q already exists", m[1])}
		}
		if srv.slots == nil {
			srv.slots = map[string]bool{}
		}
		srv.slots[m[1]] = true
		return nil, nil
	case dropSlotRE.MatchString(sql):
		m := dropSlotRE.FindStringSubmatch(sql)
		if !srv.slots[m[1]] {
			return nil, &pgconn.PgError{Severity: "ERROR", Code: "42704", Message: fmt.Sprintf("replication slot %q does not exist", m[1])}
		}
		delete(srv.slots, m[1])
		return nil, nil
	case syncSetRE.MatchString(sql):
		srv.syncNames = strings.ReplaceAll(syncSetRE.FindStringSubmatch(sql)[1], "''", "'")
		return nil, nil
	case grantFnRE.MatchString(sql):
		m := grantFnRE.FindStringSubmatch(sql)
		if srv.roles[m[2]] == nil {
			return nil, &pgconn.PgError{Severity: "ERROR", Code: "42704", Message: fmt.Sprintf("role %q does not exist", m[2])}
		}
		if srv.grants == nil {
			srv.grants = map[string]bool{}
		}
		srv.grants[m[2]+" "+m[1]] = true
		return nil, nil
	case createDBRE.MatchString(sql):
		m := createDBRE.FindStringSubmatch(sql)
		srv.databases[m[1]] = m[2]
		return nil, nil
	case ownerRE.MatchString(sql):
		m := ownerRE.FindStringSubmatch(sql)
		srv.databases[m[1]] = m[2]
		return nil, nil
	case strings.HasPrefix(sql, "DO ") && strings.Contains(sql, "legacy name :="):
		r, legacy := doRoleRE.FindStringSubmatch(sql)[1], doLegacyRE.FindStringSubmatch(sql)[1]
		if srv.bootstrap != r {
			return nil, nil
		}
		old := srv.roles[r]
		srv.roles[legacy] = &role{superuser: true}
		srv.roles[r] = &role{verifier: old.verifier}
		srv.bootstrap = legacy
		return nil, nil
	case strings.HasPrefix(sql, "DO ") && strings.Contains(sql, "SUPERUSER LOGIN"):
		r := doRoleRE.FindStringSubmatch(sql)[1]
		if srv.roles[r] == nil {
			srv.roles[r] = &role{superuser: true}
			return []string{"dbkeeper: created superuser role " + r}, nil
		}
		srv.roles[r].superuser = true
		return nil, nil
	case strings.HasPrefix(sql, "DO ") && strings.Contains(sql, "bootstrap superuser of this server"):
		r := doRoleRE.FindStringSubmatch(sql)[1]
		if srv.bootstrap == r {
			return nil, &pgconn.PgError{Severity: "ERROR", Code: "55000", Message: fmt.Sprintf("role %s is the bootstrap superuser of this server", r)}
		}
		var notices []string
		if srv.roles[r] == nil {
			srv.roles[r] = &role{}
			notices = append(notices, "dbkeeper: created role "+r)
		}
		if srv.roles[r].superuser {
			srv.roles[r].superuser = false
			notices = append(notices, "dbkeeper: took SUPERUSER, CREATEDB, CREATEROLE, REPLICATION and BYPASSRLS from role "+r)
		}
		return notices, nil
	}
	return nil, &pgconn.PgError{Severity: "ERROR", Code: "0A000", Message: "instancetest: statement not understood"}
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
