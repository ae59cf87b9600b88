package instancetest

import (
	"context"
	"regexp"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dbkeeper/dbkeeper/internal/engine"
)

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

// Exec applies sql to the server; each statement it understands is a
// method of server (statements.go).
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
		return nil, srv.setPassword(setRE.FindStringSubmatch(sql))
	case createRE.MatchString(sql):
		return nil, srv.createRole(createRE.FindStringSubmatch(sql))
	case addSlotRE.MatchString(sql):
		return nil, srv.addSlot(addSlotRE.FindStringSubmatch(sql))
	case dropSlotRE.MatchString(sql):
		return nil, srv.dropSlot(dropSlotRE.FindStringSubmatch(sql))
	case syncSetRE.MatchString(sql):
		srv.syncNames = strings.ReplaceAll(syncSetRE.FindStringSubmatch(sql)[1], "''", "'")
		return nil, nil
	case grantFnRE.MatchString(sql):
		return nil, srv.grantExecute(grantFnRE.FindStringSubmatch(sql))
	case createDBRE.MatchString(sql):
		m := createDBRE.FindStringSubmatch(sql)
		srv.databases[m[1]] = m[2]
		return nil, nil
	case ownerRE.MatchString(sql):
		m := ownerRE.FindStringSubmatch(sql)
		srv.databases[m[1]] = m[2]
		return nil, nil
	case strings.HasPrefix(sql, "DO ") && strings.Contains(sql, "legacy name :="):
		srv.migrateLegacy(sql)
		return nil, nil
	case strings.HasPrefix(sql, "DO ") && strings.Contains(sql, "SUPERUSER LOGIN"):
		return srv.ensureSuperuser(sql), nil
	case strings.HasPrefix(sql, "DO ") && strings.Contains(sql, "bootstrap superuser of this server"):
		return srv.ensureAppRole(sql)
	}
	return nil, &pgconn.PgError{Severity: "ERROR", Code: "0A000", Message: "instancetest: statement not understood"}
}
