package engine_test

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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

// backupPod is what the backup CronJob's pod would run: its container's
// command and environment, with the Secret's values filled in, the
// Service's address replaced by the local server's, and the backup volume
// by a local directory.
type backupPod struct {
	command []string
	env     map[string]string
	dir     string
}

func renderBackupPod(t *testing.T, db *dbv1.Database, eng engine.Engine, secret *corev1.Secret, srv *postgres.Server, dir string) backupPod {
	t.Helper()
	ac, err := resources.BackupCronJob(db, eng, resources.TLSOff)
	require.NoError(t, err)
	raw, err := json.Marshal(ac)
	require.NoError(t, err)
	cron := &batchv1.CronJob{}
	require.NoError(t, json.Unmarshal(raw, cron))
	pod := cron.Spec.JobTemplate.Spec.Template.Spec
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	mount := ""
	for _, m := range c.VolumeMounts {
		if m.MountPath != "/tmp" {
			mount = m.MountPath
		}
	}
	require.NotEmpty(t, mount, "the backup container mounts the backup volume")

	p := backupPod{env: map[string]string{}, dir: dir}
	for _, arg := range append(slices.Clone(c.Command), c.Args...) {
		if arg == mount {
			arg = dir
		}
		p.command = append(p.command, arg)
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			require.Equal(t, secret.Name, ref.Name, "env %s comes from another Secret", e.Name)
			v, ok := secret.Data[ref.Key]
			if !ok {
				require.True(t, ptr.Deref(ref.Optional, false), "Secret %s lacks key %s", secret.Name, ref.Key)
				continue
			}
			p.env[e.Name] = string(v)
		default:
			p.env[e.Name] = e.Value
		}
	}
	// The pod reaches the server through the Service; here it is local.
	require.Equal(t, resources.ClientServiceName(db)+"."+db.Namespace+".svc", p.env["PGHOST"])
	p.env["PGHOST"], p.env["PGPORT"] = "127.0.0.1", strconv.Itoa(srv.Port)
	return p
}

func (p backupPod) run(t *testing.T, srv *postgres.Server, command []string, override map[string]string) (string, error) {
	t.Helper()
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env = []string{"PATH=" + srv.Bin + ":/usr/bin:/bin", "HOME=" + p.dir}
	for k, v := range p.env {
		if o, ok := override[k]; ok {
			v = o
		}
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// dumps lists the files of the backup directory.
func dumps(t *testing.T, dir string) (complete, other []string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, ".dump") && !strings.HasPrefix(name, "."):
			complete = append(complete, name)
		case strings.HasSuffix(name, ".dump.sha256") && !strings.HasPrefix(name, "."):
		default:
			other = append(other, name)
		}
	}
	for _, d := range complete {
		_, err := os.Stat(filepath.Join(dir, d+".sha256"))
		assert.NoError(t, err, "dump %s has no checksum", d)
	}
	return complete, other
}

func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return strconv.Itoa(port)
}

// realServer starts a PostgreSQL server for a Database named orders with
// the given retention and creates the login role of its generated Secret.
// It skips under -short.
func realServer(t *testing.T, retention int32) (srv *postgres.Server, eng engine.Engine, db *dbv1.Database, secret *corev1.Secret, user string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped under -short")
	}
	srv = postgres.Start(t)
	eng, err := engine.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	db = &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"},
		Spec:       dbv1.DatabaseSpec{Engine: dbv1.EnginePostgres, Version: "17"},
	}
	db.Spec.Backup.Retention = retention
	secret = resources.CredentialsSecret(db, eng, "s3cret-"+strconv.FormatInt(time.Now().UnixNano(), 36), resources.ClientTLS{})
	user = string(secret.Data["username"])
	srv.SQL(t, "postgres", fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", user, secret.Data["password"]))
	return srv, eng, db, secret, user
}

// fillItems creates the database owned by user with an items table of n
// rows written as that user.
func fillItems(t *testing.T, srv *postgres.Server, database, user string, n int) {
	t.Helper()
	srv.SQL(t, "postgres", fmt.Sprintf("CREATE DATABASE %s OWNER %s", database, user))
	srv.SQL(t, database, fmt.Sprintf("SET ROLE %s; CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL); "+
		"INSERT INTO items SELECT g, 'item-' || g FROM generate_series(1, %d) g", user, n))
}

// TestBackupAndRestoreOnARealServer runs the backup CronJob's command, as the
// builder renders it, against a real PostgreSQL holding known rows: the dump
// lands atomically with its checksum, retention prunes, failures exit
// non-zero and leave nothing, and the restore command brings the rows back
// in a fresh database.
func TestBackupAndRestoreOnARealServer(t *testing.T) {
	srv, eng, db, secret, user := realServer(t, 2)
	database := resources.GeneratedUsername
	fillItems(t, srv, database, user, 500)
	want := srv.SQL(t, database, "SELECT count(*), sum(id), string_agg(name, ',' ORDER BY id) FROM items")

	dir := t.TempDir()
	pod := renderBackupPod(t, db, eng, secret, srv, dir)

	out, err := pod.run(t, srv, pod.command, nil)
	require.NoError(t, err, "backup: %s", out)
	complete, other := dumps(t, dir)
	require.Len(t, complete, 1, "one dump after one backup (output: %s)", out)
	assert.Empty(t, other, "stray files")
	assert.Regexp(t, `^orders-\d{8}T\d{6}Z\.dump$`, complete[0])
	first := complete[0]

	// Two more runs, a second apart (the file name has seconds): retention 2.
	for range 2 {
		time.Sleep(1100 * time.Millisecond)
		out, err := pod.run(t, srv, pod.command, nil)
		require.NoError(t, err, "backup: %s", out)
	}
	complete, other = dumps(t, dir)
	require.Len(t, complete, 2, "retention keeps the newest 2: %v", complete)
	assert.Empty(t, other)
	assert.NotContains(t, complete, first, "the oldest dump was not pruned")

	// Failures exit non-zero and leave nothing behind.
	for name, override := range map[string]map[string]string{
		"wrong password":     {"PGPASSWORD": "not-the-password"},
		"unreachable server": {"PGPORT": closedPort(t)},
		"missing database":   {"PGDATABASE": "nope"},
	} {
		time.Sleep(1100 * time.Millisecond)
		out, err := pod.run(t, srv, pod.command, override)
		assert.Error(t, err, "%s: the backup succeeded: %s", name, out)
		after, other := dumps(t, dir)
		assert.Equal(t, complete, after, "%s changed the dumps", name)
		assert.Empty(t, other, "%s left files", name)
	}

	// Restore the newest dump into a fresh database.
	slices.Sort(complete)
	newest := complete[len(complete)-1]
	srv.SQL(t, "postgres", fmt.Sprintf("CREATE DATABASE restored OWNER %s", user))
	restore := eng.RestoreCommand(dir, "orders", newest)
	out, err = pod.run(t, srv, restore, map[string]string{"PGDATABASE": "restored"})
	require.NoError(t, err, "restore: %s", out)
	assert.Equal(t, want, srv.SQL(t, "restored", "SELECT count(*), sum(id), string_agg(name, ',' ORDER BY id) FROM items"))

	// "latest" finds the newest dump; a prefix without dumps is an error.
	srv.SQL(t, "postgres", fmt.Sprintf("CREATE DATABASE latest OWNER %s", user))
	out, err = pod.run(t, srv, eng.RestoreCommand(dir, "orders", "latest"), map[string]string{"PGDATABASE": "latest"})
	require.NoError(t, err, "restore latest: %s", out)
	assert.Contains(t, out, newest)
	assert.Equal(t, want, srv.SQL(t, "latest", "SELECT count(*), sum(id), string_agg(name, ',' ORDER BY id) FROM items"))
	srv.SQL(t, "postgres", fmt.Sprintf("CREATE DATABASE billing OWNER %s", user))
	out, err = pod.run(t, srv, eng.RestoreCommand(dir, "billing", "latest"), map[string]string{"PGDATABASE": "billing"})
	assert.Error(t, err, "restored a dump of another Database: %s", out)
	assert.Contains(t, out, "no dump of billing")

	// A dump whose checksum does not match is refused.
	f := filepath.Join(dir, newest)
	data, err := os.ReadFile(f)
	require.NoError(t, err)
	data[len(data)/2] ^= 0xff
	require.NoError(t, os.WriteFile(f, data, 0o644))
	srv.SQL(t, "postgres", fmt.Sprintf("CREATE DATABASE corrupt OWNER %s", user))
	out, err = pod.run(t, srv, restore, map[string]string{"PGDATABASE": "corrupt"})
	assert.Error(t, err, "a corrupt dump was restored: %s", out)
	assert.Contains(t, out, "checksum mismatch")
	assert.Equal(t, "0", srv.SQL(t, "corrupt", "SELECT count(*) FROM pg_tables WHERE tablename = 'items'"))
}

// withEnv is the pod with more environment, e.g. the HOSTNAME a kubelet sets
// to the pod's name.
func (p backupPod) withEnv(env map[string]string) backupPod {
	q := p
	q.env = maps.Clone(p.env)
	maps.Copy(q.env, env)
	return q
}

// TestConcurrentBackupsNeverShareAFile runs two backups of one Database at
// once, started in the same second, into one directory with one prefix, as
// an on-demand Job and a scheduled one can: each dumps a different database,
// so a mix-up of the two shows in the rows. Both must leave a complete dump
// of their own, with a valid checksum, that restores their own rows.
func TestConcurrentBackupsNeverShareAFile(t *testing.T) {
	srv, eng, db, secret, user := realServer(t, 5)
	const rows = "SELECT count(*), sum(id), md5(string_agg(name, ',' ORDER BY id)) FROM items"
	want := map[string]string{}
	for _, name := range []string{"alpha", "beta"} {
		srv.SQL(t, "postgres", fmt.Sprintf("CREATE DATABASE %s OWNER %s", name, user))
		// Large enough that the two dumps are being written at the same time.
		srv.SQL(t, name, fmt.Sprintf("SET ROLE %s; CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL); "+
			"INSERT INTO items SELECT g, '%s-' || g || repeat(md5(g::text), 4) FROM generate_series(1, 200000) g", user, name))
		want[name] = srv.SQL(t, name, rows)
	}

	dir := t.TempDir()
	pod := renderBackupPod(t, db, eng, secret, srv, dir)
	// Start both just after a second begins, so that they stamp the same second.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 20*time.Millisecond)))
	var wg sync.WaitGroup
	outs, errs := make([]string, 2), make([]error, 2)
	for i, name := range []string{"alpha", "beta"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := pod.withEnv(map[string]string{"HOSTNAME": "orders-backup-" + name + "-x7k2p"})
			outs[i], errs[i] = p.run(t, srv, p.command, map[string]string{"PGDATABASE": name})
		}()
	}
	wg.Wait()
	for i := range outs {
		require.NoError(t, errs[i], "backup %d: %s", i, outs[i])
	}
	if !strings.Contains(outs[0]+outs[1], "is taken by another dump") {
		t.Logf("the two backups did not stamp the same second (a slow start?): %q", outs)
	}
	complete, other := dumps(t, dir)
	require.Len(t, complete, 2, "two backups, two dumps (outputs: %q)", outs)
	assert.Empty(t, other, "stray files")

	got := map[string]string{}
	for i, dump := range complete {
		assert.Regexp(t, `^orders-\d{8}T\d{6}Z\.dump$`, dump)
		check := exec.Command("sha256sum", "--check", "--strict", dump+".sha256")
		check.Dir = dir
		out, err := check.CombinedOutput()
		require.NoError(t, err, "checksum of %s: %s", dump, out)
		target := fmt.Sprintf("restored%d", i)
		srv.SQL(t, "postgres", fmt.Sprintf("CREATE DATABASE %s OWNER %s", target, user))
		out2, err := pod.run(t, srv, eng.RestoreCommand(dir, "orders", dump), map[string]string{"PGDATABASE": target})
		require.NoError(t, err, "restore %s: %s", dump, out2)
		got[dump] = srv.SQL(t, target, rows)
	}
	assert.ElementsMatch(t, []string{want["alpha"], want["beta"]}, slices.Collect(maps.Values(got)),
		"each dump restores the rows of its own database")
}

// TestBackupWithAUserSecret runs the backup of a Database whose Secret is
// the user's own: with only username and password (what the docs ask for),
// the pod starts (PGDATABASE is optional, so unset) and dumps the database
// named like the user, which the image's entrypoint creates when POSTGRES_DB
// is unset; with a database key, the engine creates that database
// (POSTGRES_DB) and the backup dumps it.
func TestBackupWithAUserSecret(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped under -short")
	}
	srv := postgres.Start(t)
	eng, err := engine.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	db := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "billing"},
		Spec: dbv1.DatabaseSpec{Engine: dbv1.EnginePostgres, Version: "17",
			Credentials: &dbv1.CredentialsSpec{SecretName: "billing-owner"}},
	}
	db.Spec.Backup.Retention = 3
	for name, data := range map[string]map[string]string{
		"without database": {"username": "owner1", "password": "pw-1"},
		"with database":    {"username": "owner2", "password": "pw-2", "database": "ledger"},
	} {
		t.Run(name, func(t *testing.T) {
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "billing-owner"}, Data: map[string][]byte{}}
			for k, v := range data {
				secret.Data[k] = []byte(v)
			}
			// What dbkeeper creates once the server answers (the engine's
			// env no longer names it): the user, and the Secret's database,
			// the user's name by default.
			env := map[string]string{"POSTGRES_USER": data["username"], "POSTGRES_PASSWORD": data["password"]}
			for _, e := range eng.Env(secret.Name) {
				assert.NotEqual(t, "POSTGRES_DB", e.Name, "the entrypoint must not create the application's database")
			}
			created := engine.AppDatabase(secret.Data)
			assert.Equal(t, cmp.Or(data["database"], data["username"]), created, "the application's database")
			srv.SQL(t, "postgres", fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", env["POSTGRES_USER"], env["POSTGRES_PASSWORD"]))
			srv.SQL(t, "postgres", fmt.Sprintf("CREATE DATABASE %s OWNER %s", created, env["POSTGRES_USER"]))
			srv.SQL(t, created, fmt.Sprintf("SET ROLE %s; CREATE TABLE items AS SELECT g AS id FROM generate_series(1, 42) g", env["POSTGRES_USER"]))

			dir := t.TempDir()
			pod := renderBackupPod(t, db, eng, secret, srv, dir)
			out, err := pod.run(t, srv, pod.command, nil)
			require.NoError(t, err, "backup: %s", out)
			assert.Contains(t, out, "dumping database "+created+" ")
			complete, _ := dumps(t, dir)
			require.Len(t, complete, 1)
			target := "restored_" + created
			srv.SQL(t, "postgres", fmt.Sprintf("CREATE DATABASE %s OWNER %s", target, env["POSTGRES_USER"]))
			into := pod.withEnv(map[string]string{"PGDATABASE": target})
			out, err = into.run(t, srv, eng.RestoreCommand(dir, db.Name, complete[0]), nil)
			require.NoError(t, err, "restore: %s", out)
			assert.Equal(t, "42", srv.SQL(t, target, "SELECT count(*) FROM items"))
		})
	}
}
