package engine_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/postgres"
)

// renderRestorePod is what the restore Job's pod would run: its command
// and environment with the Secret's values filled in, the server's pod
// address replaced by the local server's and the backup volume by dir.
func renderRestorePod(t *testing.T, db *dbv1.Database, eng engine.Engine, secret *corev1.Secret, srv *postgres.Server, dir string) backupPod {
	t.Helper()
	ac, err := resources.RestoreJob(db, eng, resources.TLSOff)
	require.NoError(t, err)
	raw, err := json.Marshal(ac)
	require.NoError(t, err)
	job := &batchv1.Job{}
	require.NoError(t, json.Unmarshal(raw, job))
	require.Len(t, job.Spec.Template.Spec.Containers, 1)
	c := job.Spec.Template.Spec.Containers[0]
	p := backupPod{env: map[string]string{}, dir: dir}
	for _, arg := range append(slices.Clone(c.Command), c.Args...) {
		if arg == resources.BackupMountPath {
			arg = dir
		}
		p.command = append(p.command, arg)
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			p.env[e.Name] = e.Value
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		require.NotNil(t, ref, "env %s", e.Name)
		v, ok := secret.Data[ref.Key]
		if !ok {
			require.True(t, ptr.Deref(ref.Optional, false), "Secret %s lacks key %s", secret.Name, ref.Key)
			continue
		}
		p.env[e.Name] = string(v)
	}
	p.env["PGHOST"], p.env["PGPORT"] = "127.0.0.1", strconv.Itoa(srv.Port)
	return p
}

// exitCode is the exit status of a finished command, 0 without error.
func exitCode(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "not an exit: %v", err)
	return exit.ExitCode()
}

// TestRestoreOnlyIntoAFreshDatabase runs the restore Job's command, as the
// builder renders it, against a real server: it restores into a database
// as initdb and POSTGRES_DB leave it and marks it in the database itself;
// run again (a re-created Database without status) it touches nothing, even
// when the dump has been pruned since; a database that holds anything a
// user created and no mark is refused with RestoreRefusedExitCode and left
// as it was.
func TestRestoreOnlyIntoAFreshDatabase(t *testing.T) {
	srv, eng, source, secret, user := realServer(t, 2)
	database := resources.GeneratedUsername
	fillItems(t, srv, database, user, 300)
	const rows = "SELECT count(*), sum(id), md5(string_agg(name, ',' ORDER BY id)) FROM items"
	want := srv.SQL(t, database, rows)

	dir := t.TempDir()
	backup := renderBackupPod(t, source, eng, secret, srv, dir)
	out, err := backup.run(t, srv, backup.command, nil)
	require.NoError(t, err, "backup: %s", out)
	complete, _ := dumps(t, dir)
	require.Len(t, complete, 1)

	copyDB := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "copy"},
		Spec: dbv1.DatabaseSpec{Engine: dbv1.EnginePostgres, Version: "17",
			Bootstrap: &dbv1.BootstrapSpec{FromBackup: &dbv1.BootstrapFromBackup{Database: "orders"}}},
	}
	restore := renderRestorePod(t, copyDB, eng, secret, srv, dir)
	run := func(target string) (string, int) {
		t.Helper()
		out, err := restore.run(t, srv, restore.command, map[string]string{"PGDATABASE": target})
		return out, exitCode(t, err)
	}
	comment := func(target string) string {
		return srv.SQL(t, target, "SELECT coalesce(shobj_description(oid, 'pg_database'), '') FROM pg_database WHERE datname = current_database()")
	}

	// A database as the image's entrypoint creates it: restored and marked.
	srv.SQL(t, "postgres", fmt.Sprintf("CREATE DATABASE fresh OWNER %s", user))
	out, code := run("fresh")
	require.Equal(t, 0, code, "restore into a fresh database: %s", out)
	assert.Equal(t, want, srv.SQL(t, "fresh", rows))
	assert.Equal(t, "dbkeeper: restored from orders/"+complete[0], comment("fresh"), "no mark in the restored database")

	// Again, as a re-created Database without status would: nothing is
	// touched, not even a row written since, and the mark says why.
	srv.SQL(t, "fresh", "INSERT INTO items VALUES (1000, 'written after the restore')")
	after := srv.SQL(t, "fresh", rows)
	out, code = run("fresh")
	require.Equal(t, 0, code, "a second restore failed: %s", out)
	assert.Contains(t, out, "already restored from orders/"+complete[0])
	assert.Equal(t, after, srv.SQL(t, "fresh", rows), "the second run changed the data")
	// Also once retention has pruned the dump it came from.
	require.NoError(t, os.Rename(filepath.Join(dir, complete[0]), filepath.Join(dir, "pruned")))
	out, code = run("fresh")
	assert.Equal(t, 0, code, "a second restore without the dump failed: %s", out)
	assert.Equal(t, after, srv.SQL(t, "fresh", rows))
	require.NoError(t, os.Rename(filepath.Join(dir, "pruned"), filepath.Join(dir, complete[0])))

	// The mark stays with its database: a dump of the restored database
	// does not carry it.
	out, err = backup.run(t, srv, backup.command, map[string]string{"PGDATABASE": "fresh"})
	require.NoError(t, err, "backup of the restored database: %s", out)
	latest, _ := dumps(t, dir)
	slices.Sort(latest)
	list, err := exec.Command(filepath.Join(srv.Bin, "pg_restore"), "--list", filepath.Join(dir, latest[len(latest)-1])).CombinedOutput()
	require.NoError(t, err, "%s", list)
	assert.NotContains(t, string(list), "dbkeeper")
	assert.NotContains(t, string(list), "DATABASE")

	// A restore that dies half-way (here a truncated dump with a matching
	// checksum) leaves the database empty and unmarked, so a retry may
	// restore it.
	data, err := os.ReadFile(filepath.Join(dir, complete[0]))
	require.NoError(t, err)
	cut := "orders-20000101T000000Z.dump"
	require.NoError(t, os.WriteFile(filepath.Join(dir, cut), data[:len(data)*3/4], 0o644))
	sum, err := exec.Command("sha256sum", filepath.Join(dir, cut)).Output()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, cut+".sha256"), []byte(strings.Replace(string(sum), dir+"/", "", 1)), 0o644))
	srv.SQL(t, "postgres", fmt.Sprintf("CREATE DATABASE interrupted OWNER %s", user))
	out, err = restore.run(t, srv, engine.Postgres{}.RestoreCommand(dir, "orders", cut), map[string]string{"PGDATABASE": "interrupted"})
	require.Error(t, err, "a truncated dump restored: %s", out)
	assert.NotEqual(t, engine.RestoreRefusedExitCode, exitCode(t, err), out)
	t.Logf("the truncated restore: %s", out)
	assert.Equal(t, "0", srv.SQL(t, "interrupted", "SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace"), "a failed restore left objects")
	assert.Empty(t, comment("interrupted"), "a failed restore left the mark")
	out, err = restore.run(t, srv, engine.Postgres{}.RestoreCommand(dir, "orders", complete[0]), map[string]string{"PGDATABASE": "interrupted"})
	require.NoError(t, err, "the retry after a failed restore: %s", out)
	assert.Equal(t, want, srv.SQL(t, "interrupted", rows))

	// Anything a user created, and no mark: refused, nothing touched.
	for name, create := range map[string]string{
		"a table":        "CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL); INSERT INTO items VALUES (1, 'live')",
		"an empty table": "CREATE TABLE accounts (id int)",
		"a view":         "CREATE VIEW answer AS SELECT 42 AS a",
		"a sequence":     "CREATE SEQUENCE tickets",
		"a function":     "CREATE FUNCTION answer() RETURNS int LANGUAGE sql AS 'SELECT 42'",
		"a type":         "CREATE TYPE mood AS ENUM ('ok')",
		"a schema":       "CREATE SCHEMA billing",
		"a large object": "SELECT lo_from_bytea(0, 'blob')",
	} {
		target := "live_" + strings.ReplaceAll(name, " ", "_")
		srv.SQL(t, "postgres", fmt.Sprintf("CREATE DATABASE %s OWNER %s", target, user))
		srv.SQL(t, target, fmt.Sprintf("SET ROLE %s; %s", user, create))
		const objects = "SELECT count(*) FROM pg_class WHERE relnamespace <> 'pg_catalog'::regnamespace AND relnamespace <> 'information_schema'::regnamespace AND relnamespace <> 'pg_toast'::regnamespace"
		before := srv.SQL(t, target, objects)
		out, code := run(target)
		assert.Equal(t, engine.RestoreRefusedExitCode, code, "%s: restored over it: %s", name, out)
		assert.Contains(t, out, "refusing to restore", name)
		t.Logf("%s: %s", name, out)
		assert.Equal(t, before, srv.SQL(t, target, objects), "%s: the refused restore changed the database", name)
		assert.Empty(t, comment(target), "%s: marked", name)
	}
	assert.Equal(t, "1|1|"+srv.SQL(t, "postgres", "SELECT md5('live')"), srv.SQL(t, "live_a_table", rows), "the live rows changed")
}
