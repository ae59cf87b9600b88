package engine_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/test/framework/postgres"
)

// TestRestoreAsSuperuserWithAppRole is the restore of issue 17 (design
// D7): the Job connects as the superuser, with DBKEEPER_APP_ROLE naming
// the application's role, into the database dbkeeper made for it; every
// restored object is owned by the application, which then uses them, and
// the restore mark is set as before.
func TestRestoreAsSuperuserWithAppRole(t *testing.T) {
	srv, eng, db, secret, user := realServer(t, 3)
	// The source: a dump written by the backup command, as today.
	fillItems(t, srv, "app", user, 100)
	want := srv.SQL(t, "app", "SELECT count(*), sum(id) FROM items")
	dir := t.TempDir()
	pod := renderBackupPod(t, db, eng, secret, srv, dir)
	out, err := pod.run(t, srv, pod.command, nil)
	require.NoError(t, err, "backup: %s", out)
	complete, _ := dumps(t, dir)
	require.Len(t, complete, 1)

	// The target: a new Database's server, as dbkeeper leaves it before the
	// restore: the application's role owns an empty database named like it.
	setUpAppRole(t, srv, "shopapp", "shopapp", "shop-pw")
	restore := pod.withEnv(map[string]string{
		"PGUSER": postgres.Superuser, "PGPASSWORD": srv.Password, "DBKEEPER_APP_ROLE": "shopapp",
	})
	delete(restore.env, "PGDATABASE") // a user Secret without a database key
	out, err = restore.run(t, srv, eng.RestoreCommand(dir, db.Name, complete[0]), nil)
	require.NoError(t, err, "restore: %s", out)
	assert.Contains(t, out, "into database shopapp")

	assert.Equal(t, want, srv.SQL(t, "shopapp", "SELECT count(*), sum(id) FROM items"))
	assert.Equal(t, "shopapp", srv.SQL(t, "shopapp",
		"SELECT string_agg(DISTINCT pg_get_userbyid(relowner), ',') FROM pg_class WHERE relnamespace = 'public'::regnamespace"),
		"the application owns what was restored")
	assert.Contains(t, srv.SQL(t, "postgres", "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = 'shopapp'"),
		fmt.Sprintf("dbkeeper: restored from %s/%s", db.Name, complete[0]))
	out, err = login(srv, "shopapp", "shop-pw", "shopapp", "INSERT INTO items VALUES (1000, 'new'); ALTER TABLE items ADD COLUMN note text; SELECT count(*) FROM items")
	require.NoError(t, err, "the application uses its restored tables: %s", out)
	assert.Equal(t, "101", lastLine(out))

	out, err = restore.run(t, srv, eng.RestoreCommand(dir, db.Name, complete[0]), nil)
	require.NoError(t, err, "a second run: %s", out)
	assert.Contains(t, out, "not restoring again")
}
