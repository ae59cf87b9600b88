package roles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/dbkeeper/dbkeeper/internal/engine"
)

// catalog is what the server has of the roles and databases the planner
// looks at: those of the spec, those it kept before, the application's.
type catalog struct {
	// User is the role dbkeeper is connected as.
	User string `json:"user"`
	// Recovery: the server is a standby (a switchover or failover is under
	// way): nothing can be written there.
	Recovery  bool            `json:"recovery"`
	Roles     []*seenRole     `json:"roles"`
	Databases []*seenDatabase `json:"databases"`
}

// seenRole is a role as pg_authid has it. Password is the verifier the
// server keeps: it never goes to a log, an Event or a status.
type seenRole struct {
	Name            string  `json:"name"`
	Bootstrap       bool    `json:"bootstrap"`
	Superuser       bool    `json:"superuser"`
	CreateRole      bool    `json:"createrole"`
	CreateDB        bool    `json:"createdb"`
	Login           bool    `json:"login"`
	Replication     bool    `json:"replication"`
	BypassRLS       bool    `json:"bypassrls"`
	ConnectionLimit int32   `json:"connectionLimit"`
	Password        *string `json:"password"`
	// MemberOf are its memberships, one per grant (PostgreSQL 16 keeps
	// one per grantor).
	MemberOf []membership `json:"memberOf"`
	// OwnedDatabases are the databases it owns.
	OwnedDatabases []string `json:"ownedDatabases"`
	// Owns counts the objects it owns in each database (default
	// privileges left out: they hold no data).
	Owns []owned `json:"owns"`
	// PrivilegesIn are the databases where it holds privileges or
	// default privileges ("" for shared objects: databases, tablespaces,
	// parameters), which DROP OWNED BY revokes there.
	PrivilegesIn []string `json:"privilegesIn"`
}

// membership is one row of pg_auth_members of a role.
type membership struct {
	Role string `json:"role"`
	// Grantor is who granted it; empty when that role no longer exists
	// (PostgreSQL before 16 does not keep it).
	Grantor string `json:"grantor"`
	// Privileged: Role has SUPERUSER, CREATEROLE, REPLICATION or
	// BYPASSRLS, which a member can take with SET ROLE.
	Privileged bool `json:"privileged"`
}

// owned is how many objects a role owns in a database.
type owned struct {
	Database string `json:"database"`
	Objects  int    `json:"objects"`
}

// seenDatabase is a database as pg_database has it, with the client
// sessions connected to it (dbkeeper's own left out).
type seenDatabase struct {
	Name     string   `json:"name"`
	Owner    string   `json:"owner"`
	Sessions int      `json:"sessions"`
	Users    []string `json:"users"`
}

func (c *catalog) role(name string) *seenRole {
	for _, r := range c.Roles {
		if r.Name == name {
			return r
		}
	}
	return nil
}

func (c *catalog) database(name string) *seenDatabase {
	for _, d := range c.Databases {
		if d.Name == name {
			return d
		}
	}
	return nil
}

// Querier runs a query of at most one row and column (instance.Conn).
type Querier interface {
	QueryValue(ctx context.Context, sql string) (value *string, ok bool, err error)
}

// observe reads the catalog of the roles and databases named, in one
// query (one snapshot).
func observe(ctx context.Context, q Querier, roles, databases []string) (*catalog, error) {
	sql, err := catalogQuery(roles, databases)
	if err != nil {
		return nil, err
	}
	v, ok, err := q.QueryValue(ctx, sql)
	if err != nil {
		return nil, fmt.Errorf("reading the roles and databases: %w", err)
	}
	if !ok || v == nil {
		return nil, errors.New("reading the roles and databases: no answer")
	}
	c := &catalog{}
	if err := json.Unmarshal([]byte(*v), c); err != nil {
		// the text holds verifiers: never quoted
		return nil, errors.New("reading the roles and databases: the answer is not the JSON expected")
	}
	return c, nil
}

func set(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		if n != "" {
			m[n] = true
		}
	}
	return m
}

// authid is pg_authid's regclass, which pg_shdepend's refclassid holds for
// a role.
const (
	authid     = "'pg_catalog.pg_authid'::pg_catalog.regclass"
	defaultACL = "'pg_catalog.pg_default_acl'::pg_catalog.regclass"
)

// catalogQuery is the query observe runs: one JSON document (a superuser's:
// pg_authid holds the verifiers).
func catalogQuery(roles, databases []string) (string, error) {
	r, err := engine.TextArray(roles)
	if err != nil {
		return "", err
	}
	d, err := engine.TextArray(databases)
	if err != nil {
		return "", err
	}
	sessions := `FROM pg_catalog.pg_stat_activity s WHERE s.datid = d.oid AND s.pid <> pg_catalog.pg_backend_pid() AND s.backend_type = 'client backend'`
	return `SELECT pg_catalog.json_build_object(
  'user', current_user,
  'recovery', pg_catalog.pg_is_in_recovery(),
  'roles', (SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_object(
      'name', a.rolname, 'bootstrap', a.oid = 10,
      'superuser', a.rolsuper, 'createrole', a.rolcreaterole, 'createdb', a.rolcreatedb, 'login', a.rolcanlogin,
      'replication', a.rolreplication, 'bypassrls', a.rolbypassrls, 'connectionLimit', a.rolconnlimit,
      'password', a.rolpassword,
      'memberOf', (SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_object('role', g.rolname, 'grantor', gr.rolname,
            'privileged', g.rolsuper OR g.rolcreaterole OR g.rolreplication OR g.rolbypassrls) ORDER BY g.rolname, gr.rolname), '[]')
          FROM pg_catalog.pg_auth_members m JOIN pg_catalog.pg_authid g ON g.oid = m.roleid
          LEFT JOIN pg_catalog.pg_authid gr ON gr.oid = m.grantor WHERE m.member = a.oid),
      'ownedDatabases', (SELECT coalesce(pg_catalog.json_agg(o.datname ORDER BY o.datname), '[]')
          FROM pg_catalog.pg_database o WHERE o.datdba = a.oid),
      'owns', (SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_object('database', o.datname, 'objects', c.n) ORDER BY o.datname), '[]')
          FROM (SELECT s.dbid, count(*) AS n FROM pg_catalog.pg_shdepend s
                WHERE s.refclassid = ` + authid + ` AND s.refobjid = a.oid AND s.deptype = 'o'
                  AND s.classid <> ` + defaultACL + ` AND s.dbid <> 0 GROUP BY s.dbid) c
          JOIN pg_catalog.pg_database o ON o.oid = c.dbid),
      'privilegesIn', (SELECT coalesce(pg_catalog.json_agg(DISTINCT coalesce(o.datname::text, '')), '[]')
          FROM pg_catalog.pg_shdepend s LEFT JOIN pg_catalog.pg_database o ON o.oid = s.dbid
          WHERE s.refclassid = ` + authid + ` AND s.refobjid = a.oid
            AND (s.deptype IN ('a', 'r', 'i') OR (s.deptype = 'o' AND s.classid = ` + defaultACL + `)))
    ) ORDER BY a.rolname), '[]')
    FROM pg_catalog.pg_authid a WHERE a.rolname::text = ANY (` + r + `)),
  'databases', (SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_object(
      'name', d.datname, 'owner', pg_catalog.pg_get_userbyid(d.datdba),
      'sessions', (SELECT count(*) ` + sessions + `),
      'users', (SELECT coalesce(pg_catalog.json_agg(DISTINCT s.usename::text), '[]') ` + sessions + ` AND s.usename IS NOT NULL)
    ) ORDER BY d.datname), '[]')
    FROM pg_catalog.pg_database d WHERE d.datname::text = ANY (` + d + `))
)::text`, nil
}
