package engine_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/test/framework/postgres"
)

// TestMigrateLegacyAppRole upgrades a server as the image left it before
// issue 17 (initdb -U app: the application's role is the bootstrap
// superuser, owning its database and everything in it) and checks that the
// application keeps working, with the same password, as an ordinary owner.
func TestMigrateLegacyAppRole(t *testing.T) {
	srv := startServer(t)
	pg := engine.Postgres{}
	const admin, adminPW = "dbkeeper_admin", "admin-pw"
	// What step 1 of the upgrade does: another superuser for the operator.
	srv.SQL(t, "postgres", "CREATE ROLE "+admin+" SUPERUSER LOGIN PASSWORD '"+adminPW+"'")
	asAdmin := func(database, sql string) (string, error) { return login(srv, admin, adminPW, database, sql) }
	// The test server's bootstrap superuser is postgres: renamed, it is
	// what initdb -U app makes, with the password the old Secret held.
	out, err := asAdmin("postgres", "ALTER ROLE "+postgres.Superuser+" RENAME TO app")
	require.NoError(t, err, out)
	legacyPW := srv.Password

	out, err = login(srv, "app", legacyPW, "postgres", "CREATE DATABASE app")
	require.NoError(t, err, out)
	out, err = login(srv, "app", legacyPW, "app", `CREATE TABLE items (id serial PRIMARY KEY, name text);
		CREATE TABLE audit (id bigint GENERATED ALWAYS AS IDENTITY, what text);
		INSERT INTO items (name) VALUES ('a'), ('b');
		CREATE VIEW item_names AS SELECT name FROM items;
		CREATE MATERIALIZED VIEW item_count AS SELECT count(*) FROM items;
		CREATE SEQUENCE tickets;
		CREATE SCHEMA billing; CREATE TABLE billing.invoices (id int);
		CREATE TYPE mood AS ENUM ('ok', 'sad'); CREATE DOMAIN positive AS int CHECK (VALUE > 0); CREATE TYPE pair AS (a int, b int);
		CREATE FUNCTION twice(int) RETURNS int LANGUAGE sql AS 'SELECT $1 * 2';
		CREATE PROCEDURE noop() LANGUAGE sql AS 'SELECT 1';
		SELECT lo_create(4242)`)
	require.NoError(t, err, out)
	open := openSession(t, srv, "app", legacyPW, "app")
	assert.Equal(t, "t", open.query(t, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user;"))

	bootstrap, err := asAdmin("app", pg.BootstrapSuperuser())
	require.NoError(t, err)
	assert.Equal(t, "app", bootstrap, "a legacy Database: the application's role is the bootstrap superuser")
	ensure, err := pg.EnsureAppRole("app")
	require.NoError(t, err)
	out, err = asAdmin("postgres", ensure)
	assert.Error(t, err, "EnsureAppRole refuses the legacy role: %s", out)

	legacy := pg.LegacyRoleName("app")
	migrate, err := pg.MigrateLegacyAppRole("app", legacy)
	require.NoError(t, err)
	out, err = asAdmin("app", migrate)
	require.NoError(t, err, "migration: %s", out)
	assert.Contains(t, out, "dbkeeper: role app is now the application's own role")

	bootstrap, err = asAdmin("app", pg.BootstrapSuperuser())
	require.NoError(t, err)
	assert.Equal(t, legacy, bootstrap)
	attrs, err := asAdmin("postgres", "SELECT rolsuper, rolcanlogin FROM pg_roles WHERE oid = 10")
	require.NoError(t, err)
	assert.Equal(t, "t|f", attrs, "the old role stays a superuser that cannot log in")
	out, err = login(srv, legacy, legacyPW, "app", "SELECT 1")
	assert.Error(t, err, "the old role logs in: %s", out)

	owners, err := asAdmin("app", `SELECT string_agg(DISTINCT pg_get_userbyid(owner), ',') FROM (
		SELECT relowner FROM pg_class WHERE relnamespace IN ('public'::regnamespace, 'billing'::regnamespace)
		UNION ALL SELECT typowner FROM pg_type WHERE typnamespace = 'public'::regnamespace
		UNION ALL SELECT proowner FROM pg_proc WHERE pronamespace = 'public'::regnamespace
		UNION ALL SELECT nspowner FROM pg_namespace WHERE nspname = 'billing'
		UNION ALL SELECT lomowner FROM pg_largeobject_metadata
		UNION ALL SELECT datdba FROM pg_database WHERE datname = 'app') o(owner)`)
	require.NoError(t, err)
	assert.Equal(t, "app", owners, "the application's role owns its database and everything in it")

	out, err = login(srv, "app", legacyPW, "app", `SELECT rolsuper FROM pg_roles WHERE rolname = current_user;
		INSERT INTO items (name) VALUES ('c'); INSERT INTO audit (what) VALUES ('x'); SELECT nextval('tickets');
		REFRESH MATERIALIZED VIEW item_count; SELECT twice(21); CALL noop(); INSERT INTO billing.invoices VALUES (1);
		ALTER TYPE mood ADD VALUE 'glad'; CREATE TABLE fresh (m mood, p positive, x pair);
		SELECT count(*) FROM item_names`)
	require.NoError(t, err, "the application with its old password, as an ordinary owner: %s", out)
	assert.Equal(t, "f\nINSERT 0 1\nINSERT 0 1\n1\nREFRESH MATERIALIZED VIEW\n42\nCALL\nINSERT 0 1\nALTER TYPE\nCREATE TABLE\n3", out)
	out, err = login(srv, "app", legacyPW, "app", "CREATE TEMP TABLE x (line text); COPY x FROM PROGRAM 'id'")
	assert.Error(t, err, "COPY FROM PROGRAM after the migration: %s", out)

	assert.Equal(t, "t", open.query(t, "SELECT rolsuper FROM pg_roles WHERE oid = 10;"),
		"a session opened before keeps working (as the old role, until it reconnects)")

	out, err = asAdmin("app", migrate)
	require.NoError(t, err, out)
	assert.NotContains(t, out, "dbkeeper:", "a second run does nothing")
	out, err = asAdmin("postgres", ensure)
	require.NoError(t, err, out)
	assert.NotContains(t, out, "dbkeeper:", "the migrated role needs no repair")
}

// TestEnsureSuperuser: D6 step 1, run as the bootstrap superuser, makes a
// second superuser that logs in with the password SetPassword gives it,
// repairs one that lost SUPERUSER, and is a no-op when it is in line.
func TestEnsureSuperuser(t *testing.T) {
	srv := startServer(t)
	pg := engine.Postgres{}
	ensure, err := pg.EnsureSuperuser("ops")
	require.NoError(t, err)
	set, err := pg.SetPassword("ops", "ops-pw")
	require.NoError(t, err)
	out, err := asSuperuser(srv, ensure)
	require.NoError(t, err, out)
	out, err = asSuperuser(srv, set)
	require.NoError(t, err, out)
	out, err = login(srv, "ops", "ops-pw", "postgres", "SELECT rolsuper AND rolcanlogin FROM pg_roles WHERE rolname = current_user")
	require.NoError(t, err, out)
	assert.Equal(t, "t", out, "ops is a superuser that logs in")

	out, err = asSuperuser(srv, "ALTER ROLE ops NOSUPERUSER; "+ensure)
	require.NoError(t, err, out)
	out, err = asSuperuser(srv, "SELECT rolsuper FROM pg_roles WHERE rolname = 'ops'")
	require.NoError(t, err, out)
	assert.Equal(t, "t", out, "SUPERUSER given back")

	xmin, err := asSuperuser(srv, "SELECT xmin FROM pg_authid WHERE rolname = 'ops'")
	require.NoError(t, err)
	out, err = asSuperuser(srv, ensure)
	require.NoError(t, err, out)
	again, err := asSuperuser(srv, "SELECT xmin FROM pg_authid WHERE rolname = 'ops'")
	require.NoError(t, err)
	assert.Equal(t, xmin, again, "a second run wrote the role's row")

	_, err = pg.EnsureSuperuser(`x"; DROP ROLE postgres; --`)
	require.NoError(t, err, "a hostile name is quoted, not refused")
}
