package roles

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
)

// statements are the plan's SQL in order; a statement that carries a
// password is written "<password of ROLE>", after checking that it holds
// a verifier and never the password.
func statements(t *testing.T, p plan, passwords ...string) []string {
	t.Helper()
	var out []string
	for _, s := range p.steps {
		if !s.secret {
			out = append(out, s.sql)
			continue
		}
		require.True(t, strings.HasPrefix(s.sql, "ALTER ROLE "), s.sql)
		require.Contains(t, s.sql, " PASSWORD 'SCRAM-SHA-256$4096:")
		for _, pw := range passwords {
			require.NotContains(t, s.sql, pw, "a plaintext password in a statement")
			require.NotContains(t, s.note, pw, "a plaintext password in a note")
		}
		role, _, _ := strings.Cut(strings.TrimPrefix(s.sql, "ALTER ROLE "), " PASSWORD")
		out = append(out, "<password of "+role+">")
	}
	return out
}

func verifier(t *testing.T, password string) *string {
	t.Helper()
	v, err := engine.ScramVerifier(password)
	require.NoError(t, err)
	return &v
}

// server is a catalog with the application's role app, connected as
// postgres.
func server(roles []*seenRole, databases ...*seenDatabase) *catalog {
	return &catalog{User: "postgres", Roles: append([]*seenRole{{Name: "app", Login: true, ConnectionLimit: -1}}, roles...), Databases: databases}
}

func want(roles []dbv1.RoleSpec, databases ...dbv1.ServerDatabaseSpec) desired {
	return desired{roles: roles, databases: databases, app: app{role: "app", database: "app"}, passwords: map[string]password{}}
}

func reasons(p plan) []string {
	var out []string
	for _, pr := range p.problems {
		out = append(out, pr.reason)
	}
	return out
}

// TestPlanCreates: a new login role with its password, limit and
// memberships, and a group role: the roles first, then the password, then
// the grants; nothing when the server already has it all.
func TestPlanCreates(t *testing.T) {
	w := want([]dbv1.RoleSpec{
		{Name: "reader", PasswordSecret: &dbv1.PasswordSecretRef{Name: "reader-pw"}, ConnectionLimit: ptr.To[int32](5),
			InRoles: []string{"pg_read_all_data", "readers"}},
		{Name: "readers", Login: ptr.To(false), CreateDB: true},
	})
	w.passwords["reader"] = password{value: "s3cret-reader"}
	p := planFor(w, server(nil))
	assert.Empty(t, p.problems)
	assert.Equal(t, []string{
		`CREATE ROLE "reader" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS CONNECTION LIMIT 5`,
		`CREATE ROLE "readers" WITH NOLOGIN NOSUPERUSER CREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS CONNECTION LIMIT -1`,
		`<password of "reader">`,
		`GRANT "pg_read_all_data" TO "reader"`,
		`GRANT "readers" TO "reader"`,
	}, statements(t, p, "s3cret-reader"))
	assert.Equal(t, []string{"reader", "readers"}, p.status.Roles)
	assert.Equal(t, ReasonPasswordSet, p.steps[2].event)
	assert.Equal(t, "set the password of role reader from Secret reader-pw, key password", p.steps[2].note)

	t.Log("the server has it all: nothing to do")
	converged := server([]*seenRole{
		{Name: "reader", Login: true, ConnectionLimit: 5, Password: verifier(t, "s3cret-reader"),
			MemberOf: []membership{{Role: "pg_read_all_data", Grantor: "postgres"}, {Role: "readers", Grantor: "postgres"}}},
		{Name: "readers", CreateDB: true, ConnectionLimit: -1},
	})
	p = planFor(w, converged)
	assert.Empty(t, p.steps)
	assert.Empty(t, p.problems)
}

// TestPlanPutsBackWhatChangedByHand: login, connection limit, createdb,
// CREATEROLE and SUPERUSER given by hand, a membership added by hand in a
// predefined role, in a role of the spec and in a privileged role are
// put back; a membership in an ordinary role made by hand is left alone,
// and so is a password that is still the Secret's.
func TestPlanPutsBackWhatChangedByHand(t *testing.T) {
	w := want([]dbv1.RoleSpec{
		{Name: "reader", PasswordSecret: &dbv1.PasswordSecretRef{Name: "reader-pw"}, InRoles: []string{"pg_monitor"}},
		{Name: "writers", Login: ptr.To(false)},
	})
	w.passwords["reader"] = password{value: "s3cret"}
	seen := server([]*seenRole{
		{Name: "reader", Login: false, Superuser: true, CreateRole: true, CreateDB: true, ConnectionLimit: 2, Password: verifier(t, "s3cret"),
			MemberOf: []membership{
				{Role: "admins", Grantor: "postgres", Privileged: true},
				{Role: "pg_write_all_data", Grantor: "somebody"},
				{Role: "reporting", Grantor: "postgres"},
				{Role: "writers"},
			}},
		{Name: "writers", ConnectionLimit: -1},
	})
	p := planFor(w, seen)
	assert.Empty(t, p.problems)
	assert.Equal(t, []string{
		`ALTER ROLE "reader" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE CONNECTION LIMIT -1`,
		`REVOKE "admins" FROM "reader" GRANTED BY "postgres"`,
		`REVOKE "pg_write_all_data" FROM "reader" GRANTED BY "somebody"`,
		`REVOKE "writers" FROM "reader"`,
		`GRANT "pg_monitor" TO "reader"`,
	}, statements(t, p))
	assert.Equal(t, "altered role reader: LOGIN, NOSUPERUSER, NOCREATEDB, NOCREATEROLE, connection limit -1 (was 2)", p.steps[0].note)
}

// TestPlanPasswords: the password is written only when the server's
// verifier does not match the Secret's (it changed, or somebody changed
// the role's), removed when the spec names no Secret, and left alone
// while the Secret cannot be used.
func TestPlanPasswords(t *testing.T) {
	role := []dbv1.RoleSpec{{Name: "svc", PasswordSecret: &dbv1.PasswordSecretRef{Name: "svc", Key: "pw"}}}
	seen := server([]*seenRole{{Name: "svc", Login: true, ConnectionLimit: -1, Password: verifier(t, "first")}})

	w := want(role)
	w.passwords["svc"] = password{value: "first"}
	assert.Empty(t, planFor(w, seen).steps, "the Secret did not change")

	w.passwords["svc"] = password{value: "second"}
	p := planFor(w, seen)
	assert.Equal(t, []string{`<password of "svc">`}, statements(t, p, "first", "second"))
	assert.Equal(t, "set the password of role svc from Secret svc, key pw", p.steps[0].note)

	missing := problem{reason: dbv1.ReasonPasswordSecretMissing, message: "spec.roles[0] (svc): Secret svc named in passwordSecret does not exist"}
	w.passwords["svc"] = password{problem: &missing}
	p = planFor(w, seen)
	assert.Empty(t, p.steps, "the role keeps the password it has")
	assert.Equal(t, []problem{missing}, p.problems)

	p = planFor(want([]dbv1.RoleSpec{{Name: "svc"}}), seen)
	assert.Equal(t, []string{`ALTER ROLE "svc" PASSWORD NULL`}, statements(t, p), "no passwordSecret: no password")
}

// TestPlanPrivilegedAttributes: superuser, replication and bypassrls are
// refused without --allow-privileged-roles, naming the fields, and the
// role is kept without them (one given by hand is taken); the rest of the
// spec applies. With the flag they are given.
func TestPlanPrivilegedAttributes(t *testing.T) {
	roles := []dbv1.RoleSpec{
		{Name: "ops", Superuser: true, BypassRLS: true},
		{Name: "streamer", Replication: true},
		{Name: "plain"},
	}
	seen := server([]*seenRole{{Name: "streamer", Login: true, Replication: true, Superuser: true, ConnectionLimit: -1}})
	p := planFor(want(roles), seen)
	assert.Equal(t, []string{
		`CREATE ROLE "ops" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS CONNECTION LIMIT -1`,
		`CREATE ROLE "plain" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS CONNECTION LIMIT -1`,
		`ALTER ROLE "streamer" WITH NOSUPERUSER NOREPLICATION`,
	}, statements(t, p))
	require.Len(t, p.problems, 2)
	assert.Equal(t, dbv1.ReasonRoleRefused, p.problems[0].reason)
	assert.Contains(t, p.problems[0].message, "spec.roles[0].superuser, spec.roles[0].bypassrls are true")
	assert.Contains(t, p.problems[0].message, "--allow-privileged-roles")
	assert.Contains(t, p.problems[0].message, "role ops is kept without SUPERUSER, BYPASSRLS")
	assert.Contains(t, p.problems[1].message, "spec.roles[1].replication is true")
	assert.Equal(t, []string{"ops", "plain", "streamer"}, p.status.Roles)

	w := want(roles)
	w.allowPrivileged = true
	p = planFor(w, seen)
	assert.Empty(t, p.problems)
	assert.Equal(t, []string{
		`CREATE ROLE "ops" WITH LOGIN SUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION BYPASSRLS CONNECTION LIMIT -1`,
		`CREATE ROLE "plain" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS CONNECTION LIMIT -1`,
		`ALTER ROLE "streamer" WITH NOSUPERUSER`,
	}, statements(t, p), "the streamer asked for replication, not for superuser")
}

// TestPlanRefusesWhatIsNotTheSpecs: the application's role and database,
// the superuser dbkeeper connects as, and a database owner that is no role
// of the spec are refused; everything else is planned.
func TestPlanRefusesWhatIsNotTheSpecs(t *testing.T) {
	w := want(
		[]dbv1.RoleSpec{{Name: "app"}, {Name: "admin"}, {Name: "ok", Ensure: dbv1.EnsureAbsent}, {Name: "svc"}},
		dbv1.ServerDatabaseSpec{Name: "app"},
		dbv1.ServerDatabaseSpec{Name: "reports", Owner: "nobody"},
		dbv1.ServerDatabaseSpec{Name: "owned", Owner: "app"},
	)
	seen := server([]*seenRole{{Name: "admin", Bootstrap: true, Superuser: true}})
	p := planFor(w, seen)
	assert.Equal(t, []string{
		`CREATE ROLE "svc" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS CONNECTION LIMIT -1`,
		`CREATE DATABASE "owned" OWNER "app"`,
	}, statements(t, p))
	var msgs []string
	for _, pr := range p.problems {
		msgs = append(msgs, pr.reason+": "+pr.message)
	}
	assert.Equal(t, []string{
		"RoleRefused: spec.roles[0] (app): app is the application's role, which dbkeeper keeps from the credentials Secret: remove it from spec.roles",
		"RoleRefused: spec.roles[1] (admin): admin is the server's superuser, which dbkeeper connects as: remove it from spec.roles",
		"DatabaseRefused: spec.databases[0] (app): app is the application's database, which dbkeeper keeps from the credentials Secret: remove it from spec.databases",
		"DatabaseRefused: spec.databases[1] (reports): owner nobody is neither a role dbkeeper keeps (spec.roles, ensure Present) nor the application's role app",
	}, msgs)

	t.Log("a database owned by the application's role waits for it")
	p = planFor(want(nil, dbv1.ServerDatabaseSpec{Name: "reports"}), &catalog{User: "postgres"})
	assert.Empty(t, p.steps)
	assert.Equal(t, []string{dbv1.ReasonWaitingForCredentials}, reasons(p))
}

// TestPlanDatabases: a database is created with its owner (the
// application's role by default), its owner put back; its roles are
// created before it.
func TestPlanDatabases(t *testing.T) {
	w := want([]dbv1.RoleSpec{{Name: "etl"}},
		dbv1.ServerDatabaseSpec{Name: "staging", Owner: "etl"},
		dbv1.ServerDatabaseSpec{Name: "reports"},
		dbv1.ServerDatabaseSpec{Name: "archive", Owner: "etl"},
	)
	seen := server(nil, &seenDatabase{Name: "reports", Owner: "app"}, &seenDatabase{Name: "archive", Owner: "app"})
	p := planFor(w, seen)
	assert.Empty(t, p.problems)
	assert.Equal(t, []string{
		`CREATE ROLE "etl" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS CONNECTION LIMIT -1`,
		`CREATE DATABASE "staging" OWNER "etl"`,
		`ALTER DATABASE "archive" OWNER TO "etl"`,
	}, statements(t, p))
	assert.Equal(t, "changed the owner of database archive to etl (was app)", p.steps[2].note)
	assert.Equal(t, []string{"archive", "reports", "staging"}, p.status.Databases)
}

// TestPlanAbsent: an Absent database is dropped only while nobody is
// connected; an Absent role only when it owns nothing, its privileges
// revoked first in each database where it holds some; one that is not
// there is nothing to do.
func TestPlanAbsent(t *testing.T) {
	w := want(
		[]dbv1.RoleSpec{{Name: "gone", Ensure: dbv1.EnsureAbsent}, {Name: "granted", Ensure: dbv1.EnsureAbsent}, {Name: "owner", Ensure: dbv1.EnsureAbsent},
			{Name: "dbowner", Ensure: dbv1.EnsureAbsent}, {Name: "ownsdropped", Ensure: dbv1.EnsureAbsent}},
		dbv1.ServerDatabaseSpec{Name: "busy", Ensure: dbv1.EnsureAbsent},
		dbv1.ServerDatabaseSpec{Name: "idle", Ensure: dbv1.EnsureAbsent},
		dbv1.ServerDatabaseSpec{Name: "never", Ensure: dbv1.EnsureAbsent},
	)
	seen := server([]*seenRole{
		{Name: "granted", PrivilegesIn: []string{"", "shop"}},
		{Name: "owner", Owns: []owned{{Database: "shop", Objects: 3}}, PrivilegesIn: []string{"shop"}},
		{Name: "dbowner", OwnedDatabases: []string{"kept"}},
		{Name: "ownsdropped", OwnedDatabases: []string{"idle"}, Owns: []owned{{Database: "idle", Objects: 2}}, PrivilegesIn: []string{"idle"}},
	}, &seenDatabase{Name: "busy", Owner: "app", Sessions: 2, Users: []string{"app", "reader"}}, &seenDatabase{Name: "idle", Owner: "ownsdropped"})
	p := planFor(w, seen)
	drop, err := dropOwnedIfOwnsNothing("granted")
	require.NoError(t, err)
	assert.Equal(t, []string{
		`DROP DATABASE "idle"`,
		drop, drop,
		`DROP ROLE "granted"`,
		`DROP ROLE "ownsdropped"`,
	}, statements(t, p))
	assert.Equal(t, []string{"", "", "shop", ""}, []string{p.steps[0].database, p.steps[1].database, p.steps[2].database, p.steps[3].database})
	assert.Equal(t, "revoked the privileges of role granted on shared objects (it owns nothing)", p.steps[1].note)
	assert.Contains(t, drop, `DROP OWNED BY %I'', r)`)
	assert.Contains(t, drop, `r name := ''granted'';`)
	assert.Contains(t, drop, "LOCK TABLE pg_catalog.pg_shdepend IN SHARE MODE")

	require.Len(t, p.problems, 3)
	assert.Equal(t, []string{dbv1.ReasonDropRefused, dbv1.ReasonDropRefused, dbv1.ReasonDropRefused}, reasons(p))
	assert.Contains(t, p.problems[0].message, "spec.databases[0] (busy): database busy is not dropped while sessions are connected to it (2, of role app, reader)")
	assert.Contains(t, p.problems[1].message, "spec.roles[2] (owner): role owner is not dropped while it owns 3 objects in database shop")
	assert.Contains(t, p.problems[1].message, "REASSIGN OWNED BY owner TO")
	assert.Contains(t, p.problems[2].message, "spec.roles[3] (dbowner): role dbowner is not dropped while it owns database kept")
	assert.Empty(t, p.status.Roles)
	assert.Empty(t, p.status.Databases)
}

// TestPlanLeavesWhatLeftTheSpec: a role and a database that were kept
// (status) and left the spec are not touched: listed as released while
// the server has them, said once.
func TestPlanLeavesWhatLeftTheSpec(t *testing.T) {
	w := want([]dbv1.RoleSpec{{Name: "kept"}})
	w.previous = dbv1.RolesStatus{Roles: []string{"kept", "old"}, Databases: []string{"olddb"}, ReleasedRoles: []string{"dropped-by-hand"}}
	seen := server([]*seenRole{{Name: "kept", Login: true, ConnectionLimit: -1}, {Name: "old", Superuser: true}},
		&seenDatabase{Name: "olddb", Owner: "old", Sessions: 1})
	p := planFor(w, seen)
	assert.Empty(t, p.steps, "nothing is done to what left the spec, even a superuser")
	assert.Empty(t, p.problems)
	assert.Equal(t, dbv1.RolesStatus{Roles: []string{"kept"}, ReleasedRoles: []string{"old"}, ReleasedDatabases: []string{"olddb"}}, p.status)
	assert.Equal(t, []string{"role old", "database olddb"}, p.released)

	w.previous = p.status
	p = planFor(w, seen)
	assert.Empty(t, p.released, "said once")
	assert.Equal(t, []string{"old"}, p.status.ReleasedRoles)

	roles, databases := lookedAt(w)
	assert.Subset(t, roles, []string{"kept", "old", "app"})
	assert.Subset(t, databases, []string{"olddb", "app"})
}

// TestPlanQuotesNames: a name with a double quote (which admission
// refuses) is still one identifier in every statement.
func TestPlanQuotesNames(t *testing.T) {
	w := want([]dbv1.RoleSpec{{Name: `a"b`, InRoles: []string{"pg_monitor"}}}, dbv1.ServerDatabaseSpec{Name: `d"; DROP TABLE x; --`, Owner: `a"b`})
	p := planFor(w, server(nil))
	assert.Equal(t, []string{
		`CREATE ROLE "a""b" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS CONNECTION LIMIT -1`,
		`GRANT "pg_monitor" TO "a""b"`,
		`CREATE DATABASE "d""; DROP TABLE x; --" OWNER "a""b"`,
	}, statements(t, p))
	q, err := catalogQuery([]string{`a'b`}, []string{`c\d`})
	require.NoError(t, err)
	assert.Contains(t, q, `ARRAY['a''b']::text[]`)
	assert.Contains(t, q, `ARRAY[E'c\\d']::text[]`)
}

// TestVerdict: True names what is kept and released; False leads with the
// reason the user must act on first and says every problem.
func TestVerdict(t *testing.T) {
	c := verdict(dbv1.RolesStatus{Roles: []string{"a", "b"}, Databases: []string{"d"}, ReleasedRoles: []string{"old"}}, nil)
	assert.Equal(t, dbv1.ReasonRolesReconciled, c.Reason)
	assert.Equal(t, "the 2 roles of spec.roles and the 1 database of spec.databases are on the primary as declared; left on the server as they are since they left the spec: role old", c.Message)

	c = verdict(dbv1.RolesStatus{}, []problem{{dbv1.ReasonDropRefused, "busy"}, {dbv1.ReasonRoleRefused, "superuser"}})
	assert.Equal(t, dbv1.ReasonRoleRefused, c.Reason)
	assert.Equal(t, "superuser; busy; the rest of spec.roles and spec.databases is applied", c.Message)
}
