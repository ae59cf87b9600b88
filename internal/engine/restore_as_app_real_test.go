package engine_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestRestoreAsTheApplication runs the restore Job, as the builder renders
// it, into a new Database's server as dbkeeper leaves it before the
// restore (the application's role owns an empty database named like
// it). The Job logs in as the application, so:
//   - a dump whose statements try to become superuser (anyone who can
//     write the source's backup volume can write one; here a table
//     comment rewritten in the archive to `”; RESET ROLE; ALTER ROLE …
//     SUPERUSER; --`) fails and changes nothing: the role stays an
//     ordinary one, the database empty and unmarked (before, the Job
//     logged in as the superuser with SET ROLE, which the dump reset, and
//     the application's role became a superuser);
//   - the source's own dump restores, every object owned by the
//     application, which writes and alters them; the mark is set; a
//     second run restores nothing.
func TestRestoreAsTheApplication(t *testing.T) {
	srv, eng, db, secret, user := realServer(t, 3)
	fillItems(t, srv, "app", user, 100)
	srv.SQL(t, "app", "COMMENT ON TABLE items IS '"+strings.Repeat("x", 120)+"'")
	want := srv.SQL(t, "app", "SELECT count(*), sum(id) FROM items")
	dir := t.TempDir()
	pod := renderBackupPod(t, db, eng, secret, srv, dir)
	out, err := pod.run(t, srv, pod.command, nil)
	require.NoError(t, err, "backup: %s", out)
	complete, _ := dumps(t, dir)
	require.Len(t, complete, 1)

	target := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: "shop"},
		Spec: dbv1.DatabaseSpec{Engine: dbv1.EnginePostgres, Version: "17",
			Bootstrap: &dbv1.BootstrapSpec{FromBackup: &dbv1.BootstrapFromBackup{Database: db.Name}}}}
	targetSecret := resources.CredentialsSecret(target, eng, "shop-pw", resources.ClientTLS{})
	app := "shopapp"
	targetSecret.Data["username"] = []byte(app)
	delete(targetSecret.Data, "database") // a user Secret without a database key: the role's name
	setUpAppRole(t, srv, app, app, "shop-pw")

	hostile := t.TempDir()
	dump, err := os.ReadFile(filepath.Join(dir, complete[0]))
	require.NoError(t, err)
	comment := []byte("'" + strings.Repeat("x", 120) + "'")
	require.Equal(t, 1, bytes.Count(dump, comment), "the comment is in the archive's table of contents")
	payload := fmt.Sprintf("''; RESET ROLE; ALTER ROLE %s SUPERUSER; --", app)
	payload += strings.Repeat(" ", len(comment)-len(payload))
	dump = bytes.Replace(dump, comment, []byte(payload), 1)
	require.NoError(t, os.WriteFile(filepath.Join(hostile, complete[0]), dump, 0o600))
	sum := sha256.Sum256(dump)
	require.NoError(t, os.WriteFile(filepath.Join(hostile, complete[0]+".sha256"), fmt.Appendf(nil, "%x  %s\n", sum, complete[0]), 0o600))

	restore := renderRestorePod(t, target, eng, targetSecret, srv, hostile)
	assert.Equal(t, app, restore.env["PGUSER"], "the restore logs in as the application")
	out, err = restore.run(t, srv, eng.RestoreCommand(hostile, db.Name, complete[0]), nil)
	require.Error(t, err, "the hostile dump restored: %s", out)
	assert.Contains(t, out, "must be superuser")
	assert.Equal(t, "", roleAttributes(t, srv, app), "the dump made the application's role more than an owner")
	assert.Equal(t, "0", srv.SQL(t, app, "SELECT count(*) FROM pg_tables WHERE tablename = 'items'"), "a failed restore leaves the database empty")

	restore = renderRestorePod(t, target, eng, targetSecret, srv, dir)
	out, err = restore.run(t, srv, eng.RestoreCommand(dir, db.Name, complete[0]), nil)
	require.NoError(t, err, "restore: %s", out)
	assert.Contains(t, out, "into database "+app)
	assert.Equal(t, want, srv.SQL(t, app, "SELECT count(*), sum(id) FROM items"))
	assert.Equal(t, app, srv.SQL(t, app,
		"SELECT string_agg(DISTINCT pg_get_userbyid(relowner), ',') FROM pg_class WHERE relnamespace = 'public'::regnamespace"),
		"the application owns what was restored")
	assert.Contains(t, srv.SQL(t, "postgres", "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = '"+app+"'"),
		fmt.Sprintf("dbkeeper: restored from %s/%s", db.Name, complete[0]))
	out, err = login(srv, app, "shop-pw", app, "INSERT INTO items VALUES (1000, 'new'); ALTER TABLE items ADD COLUMN note text; SELECT count(*) FROM items")
	require.NoError(t, err, "the application uses its restored tables: %s", out)
	assert.Equal(t, "101", lastLine(out))

	out, err = restore.run(t, srv, eng.RestoreCommand(dir, db.Name, complete[0]), nil)
	require.NoError(t, err, "a second run: %s", out)
	assert.Contains(t, out, "not restoring again")
}
