package realnode

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/jobs"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
)

// backupNow asks for an on-demand backup, waits until the Job it started
// has finished and the Database's status says how, and returns the
// Database then and whether the Job failed.
func backupNow(t *testing.T, db *dbv1.Database, token string) (*dbv1.Database, bool) {
	t.Helper()
	dbtest.Patch(t, k8s, db, func(d *dbv1.Database) {
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations[dbv1.AnnotationBackupNow] = token
	})
	var got *dbv1.Database
	var failed bool
	require.Eventually(t, func() bool {
		got = dbtest.Get(t, k8s, db)
		b := got.Status.Backup
		if b == nil || b.LastOnDemandToken != token || b.LastJob == "" {
			return false
		}
		job := &batchv1.Job{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: db.Namespace, Name: b.LastJob}, job); err != nil {
			return false
		}
		done, jobFailed, at, _ := jobs.Finished(job)
		if !done {
			return false
		}
		failed = jobFailed
		if failed {
			return b.LastFailedJob == b.LastJob
		}
		return b.LastSuccessfulTime != nil && !b.LastSuccessfulTime.Time.Before(at.Truncate(time.Second))
	}, timeout, 500*time.Millisecond, "the backup Job of token %s finished and the status says so", token)
	return got, failed
}

// TestBackupRestoresIntoANewDatabase: an on-demand backup writes a real
// dump of the rows; a new Database bootstrapped from it serves the same
// rows, owned by its application's role (not a superuser), and says what
// it restored. The source runs PostgreSQL 15 and the new Database 18: the
// way a Database moves to a newer major without pg_upgrade
// (docs/user-guide/upgrades.md).
func TestBackupRestoresIntoANewDatabase(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startOperator(t, ns)
	src := newDatabase(ns, "src", "15")
	create(t, src)
	waitReady(t, src)
	fillItems(t, generated(src))

	done, failed := backupNow(t, src, "first")
	require.False(t, failed, "backup failed: %s", done.Status.Backup.LastFailureMessage)

	dbtest.AllowRestoresInto(t, k8s, src, ns)
	dst := newDatabase(ns, "dst", "18", func(d *dbv1.Database) {
		d.Spec.Bootstrap = &dbv1.BootstrapSpec{FromBackup: &dbv1.BootstrapFromBackup{Database: src.Name}}
	})
	create(t, dst)
	restored := waitReady(t, dst)
	require.NotNil(t, restored.Status.Backup)
	assert.Contains(t, restored.Status.Backup.RestoredFrom, src.Name+"/", "status names the dump")
	assert.Equal(t, rows, countItems(t, generated(dst)), "the restored Database has the source's rows")
	assert.Equal(t, "18", query(t, generated(dst), "SHOW server_version_num")[:2], "the new Database runs the newer major")
	// Restored logged in as the application's role: it owns what was
	// restored, and can change it.
	assert.Equal(t, "app|f", query(t, generated(dst), "SELECT tableowner, (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) "+
		"FROM pg_tables WHERE tablename = 'items'"))
	query(t, generated(dst), "ALTER TABLE items ADD COLUMN restored boolean; INSERT INTO items VALUES (1000, 'after the restore', true)")
	assert.NotEqual(t, secretValue(t, ns, resources.GeneratedSecretName(src), "password"),
		secretValue(t, ns, resources.GeneratedSecretName(dst), "password"), "the restored Database has credentials of its own")
}

// TestUserSecretEndToEnd: a Secret of the user's with only username and
// password runs the server, serves clients and backs up; a new password in
// it reaches the server (issue 17: before, only initdb read it, and the
// next backup failed), so the next backup succeeds with it and the old
// password is refused.
func TestUserSecretEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns)
	login := map[string]string{"username": "app", "password": "s3cret-of-the-app"}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-login",
		Annotations: map[string]string{dbv1.AnnotationCredentialsFor: "app"}}, StringData: login}
	create(t, secret)
	// The old login, for the check that the server refuses it after.
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-login-old"}, StringData: login})
	db := newDatabase(ns, "app", "17", func(d *dbv1.Database) {
		d.Spec.Credentials = &dbv1.CredentialsSpec{SecretName: secret.Name}
	})
	create(t, db)
	waitReady(t, db)
	conn := dbtest.Conn{Namespace: ns, Secret: secret.Name, Host: resources.ClientServiceHost(db)}
	assert.Equal(t, "app", query(t, conn, "SELECT current_user"))
	fillItems(t, conn)

	done, failed := backupNow(t, db, "ok")
	require.False(t, failed, "backup with the user's Secret failed: %s", done.Status.Backup.LastFailureMessage)

	t.Log("the Secret's password changes, and so does the server's")
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(secret), secret))
	secret.Data["password"] = []byte("the-new-password-of-the-app")
	require.NoError(t, k8s.Update(ctx, secret))
	cond := waitCondition(t, db, dbv1.ConditionCredentialsReady, metav1.ConditionTrue, dbv1.ReasonPasswordRotated)
	t.Logf("CredentialsReady: %s", cond.Message)
	after, failed := backupNow(t, db, "new-password")
	require.False(t, failed, "the backup after the rotation failed: %s", after.Status.Backup.LastFailureMessage)
	waitCondition(t, db, dbv1.ConditionBackupReady, metav1.ConditionTrue, dbv1.ReasonBackupScheduled)
	assert.Equal(t, rows, countItems(t, conn), "the new password through the client Service")
	out, err := psql.Query(ctx, dbtest.Conn{Namespace: ns, Secret: "app-login-old", Host: resources.ClientServiceHost(db)}, "SELECT 1", queryTimeout)
	assert.ErrorContains(t, err, "password authentication failed", "the server still takes the old password: %s", out)
}
