package instancetest

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// The statements conn.Exec understands that change a server, each given
// the match of its regular expression (or the DO block itself).

// setPassword is ALTER ROLE … PASSWORD (setRE).
func (srv *server) setPassword(m []string) error {
	r := srv.roles[m[1]]
	if r == nil {
		return &pgconn.PgError{Severity: "ERROR", Code: "42704", Message: fmt.Sprintf("role %q does not exist", m[1])}
	}
	r.verifier = m[2]
	srv.sets++
	return nil
}

// createRole is CREATE ROLE … WITH LOGIN REPLICATION PASSWORD (createRE).
func (srv *server) createRole(m []string) error {
	if srv.roles[m[1]] != nil {
		return &pgconn.PgError{Severity: "ERROR", Code: "42710", Message: fmt.Sprintf("role %q already exists", m[1])}
	}
	srv.roles[m[1]] = &role{verifier: m[2]}
	return nil
}

// addSlot is pg_create_physical_replication_slot (addSlotRE).
func (srv *server) addSlot(m []string) error {
	if srv.slots[m[1]] {
		return &pgconn.PgError{Severity: "ERROR", Code: "42710", Message: fmt.Sprintf("replication slot %q already exists", m[1])}
	}
	if srv.slots == nil {
		srv.slots = map[string]bool{}
	}
	srv.slots[m[1]] = true
	return nil
}

// dropSlot is pg_drop_replication_slot (dropSlotRE).
func (srv *server) dropSlot(m []string) error {
	if !srv.slots[m[1]] {
		return &pgconn.PgError{Severity: "ERROR", Code: "42704", Message: fmt.Sprintf("replication slot %q does not exist", m[1])}
	}
	delete(srv.slots, m[1])
	return nil
}

// grantExecute is GRANT EXECUTE ON FUNCTION (grantFnRE).
func (srv *server) grantExecute(m []string) error {
	if srv.roles[m[2]] == nil {
		return &pgconn.PgError{Severity: "ERROR", Code: "42704", Message: fmt.Sprintf("role %q does not exist", m[2])}
	}
	if srv.grants == nil {
		srv.grants = map[string]bool{}
	}
	srv.grants[m[2]+" "+m[1]] = true
	return nil
}

// migrateLegacy is engine.Postgres's MigrateLegacyAppRole DO block: the
// bootstrap superuser becomes the legacy role, and the role its name had
// keeps the password without SUPERUSER; nothing happens when the role is
// not the bootstrap superuser.
func (srv *server) migrateLegacy(sql string) {
	r, legacy := doRoleRE.FindStringSubmatch(sql)[1], doLegacyRE.FindStringSubmatch(sql)[1]
	if srv.bootstrap != r {
		return
	}
	old := srv.roles[r]
	srv.roles[legacy] = &role{superuser: true}
	srv.roles[r] = &role{verifier: old.verifier}
	srv.bootstrap = legacy
}

// ensureSuperuser is engine.Postgres's EnsureSuperuser DO block: it
// creates the superuser role, or makes the role one; it returns its
// notices.
func (srv *server) ensureSuperuser(sql string) []string {
	r := doRoleRE.FindStringSubmatch(sql)[1]
	if srv.roles[r] == nil {
		srv.roles[r] = &role{superuser: true}
		return []string{"dbkeeper: created superuser role " + r}
	}
	srv.roles[r].superuser = true
	return nil
}

// ensureAppRole is engine.Postgres's EnsureAppRole DO block, refused for
// the bootstrap superuser: it creates the role, or takes a superuser's
// powers from it; it returns its notices.
func (srv *server) ensureAppRole(sql string) ([]string, error) {
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
