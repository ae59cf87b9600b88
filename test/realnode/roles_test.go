package realnode

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
)

// TestAppRoleIsNotSuperuser: the application's credentials (the generated
// Secret's uri, through the client Service) are a role that owns its
// database and nothing more: not superuser, no CREATEROLE, no replication,
// COPY … FROM PROGRAM refused; it creates tables. The superuser's
// credentials are in another Secret, and neither they nor the replication
// role's log in over the network: only a client certificate does.
func TestAppRoleIsNotSuperuser(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startOperator(t, ns)
	db := newDatabase(ns, "least", "17")
	create(t, db)
	waitReady(t, db)
	conn := generated(db)

	assert.Equal(t, "app|f|f|f|f|f", queryEventually(t, conn,
		"SELECT rolname, rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls FROM pg_roles WHERE rolname = current_user"))
	assert.Equal(t, "f|f|f", query(t, conn, "SELECT pg_has_role(current_user, 'pg_execute_server_program', 'MEMBER'), "+
		"pg_has_role(current_user, 'pg_read_server_files', 'MEMBER'), pg_has_role(current_user, 'pg_write_server_files', 'MEMBER')"))
	assert.Equal(t, "app", query(t, conn, "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()"),
		"the application owns its database")

	out, err := psql.Query(context.Background(), conn, "CREATE TEMP TABLE shell (line text); COPY shell FROM PROGRAM 'id'", queryTimeout)
	require.Error(t, err, "COPY FROM PROGRAM ran: %s", out)
	assert.Contains(t, out, "permission denied", "COPY FROM PROGRAM refused for the right reason")
	t.Logf("COPY FROM PROGRAM as the application: %s", out)

	fillItems(t, conn)
	assert.Equal(t, "app", query(t, conn, "SELECT tableowner FROM pg_tables WHERE tablename = 'items'"))

	super := resources.SuperuserSecretName(db)
	assert.Equal(t, "postgres", secretValue(t, ns, super, "username"))
	assert.NotEqual(t, secretValue(t, ns, super, "password"), secretValue(t, ns, resources.GeneratedSecretName(db), "password"))
	uri := secretValue(t, ns, resources.GeneratedSecretName(db), "uri")
	assert.True(t, strings.HasPrefix(uri, "postgres://app:"), "the application's uri names another user than app")
	got := dbtest.Get(t, k8s, db)
	require.NotNil(t, got.Status.Credentials)
	assert.Equal(t, super, got.Status.Credentials.SuperuserSecret)

	// Neither the superuser nor the replication role logs in over the
	// network with its password, even through TLS: the server asks for a
	// client certificate of the Database's CA; the manager's kind (signed
	// for the superuser's name) logs in.
	rw := serviceTarget(t, db, resources.ClientServiceName(db))
	for _, login := range []struct{ user, secret, key string }{
		{"postgres", super, "password"},
		{agentapi.ReplicationUser, resources.ReplicationSecretName(db), resources.ReplicationPasswordKey},
	} {
		byPassword := rw
		byPassword.User, byPassword.Password, byPassword.Database = login.user, secretValue(t, ns, login.secret, login.key), "postgres"
		_, err := sqlOnce(byPassword, "SELECT 1")
		require.Error(t, err, "%s logged in over TCP with its password", login.user)
		assert.Contains(t, err.Error(), "connection requires a valid client certificate", login.user)
	}
	assert.Equal(t, "on", sqlValue(t, superuserTarget(t, db, rw), "SHOW is_superuser"), "the superuser with a certificate of its name")
}

// TestRotation: a new password in the generated Secret and in a user's
// Secret reaches the server within seconds: the new password logs in
// through the client Service, the old one is refused, a connection opened
// before keeps working, the next backup succeeds, and the status names the
// Secret's resourceVersion with CredentialsReady=True/Rotated.
func TestRotation(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startOperator(t, ns)
	t.Run("generated", func(t *testing.T) {
		t.Parallel()
		db := newDatabase(ns, "gen", "17")
		create(t, db)
		waitReady(t, db)
		rotate(t, db, resources.GeneratedSecretName(db), generated(db), "app")
	})
	t.Run("user Secret", func(t *testing.T) {
		t.Parallel()
		create(t, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop-login", Annotations: map[string]string{dbv1.AnnotationCredentialsFor: "byo"}},
			StringData: map[string]string{"username": "shop", "password": "first-password-of-shop", "database": "orders"},
		})
		db := newDatabase(ns, "byo", "17", func(d *dbv1.Database) {
			d.Spec.Credentials = &dbv1.CredentialsSpec{SecretName: "shop-login"}
		})
		create(t, db)
		waitReady(t, db)
		rotate(t, db, "shop-login", dbtest.Conn{Namespace: ns, Secret: "shop-login", Host: resources.ClientServiceHost(db)}, "shop")
	})
}

// rotate writes rows, holds a session open with the current password,
// changes the password of Secret secret, and checks what TestRotation
// says. It measures how long the new password takes to log in, from the
// Secret's update, with a client on the node polling the pod every 50 ms.
func rotate(t *testing.T, db *dbv1.Database, secret string, conn dbtest.Conn, role string) {
	ctx := context.Background()
	fillItems(t, conn)
	old := secretValue(t, db.Namespace, secret, "password")
	// The old login, kept in a Secret of its own for the checks after.
	oldSecret := &corev1.Secret{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: secret}, oldSecret))
	oldCopy := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: secret + "-old"}, Data: oldSecret.Data}
	create(t, oldCopy)
	oldConn := dbtest.Conn{Namespace: db.Namespace, Secret: oldCopy.Name, Host: resources.ClientServiceHost(db)}

	held := holdSession(t, conn)

	pod := &corev1.Pod{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Name + "-0"}, pod))
	require.NotEmpty(t, pod.Status.PodIP)
	database := secretValue(t, db.Namespace, secret, "database")
	if database == "" {
		database = role
	}
	const newPassword = "rotated-Password-42"
	sec := &corev1.Secret{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: secret}, sec))
	sec.Data["password"] = []byte(newPassword)
	require.NoError(t, k8s.Update(ctx, sec))
	updated := time.Now()
	// A client on the node, straight to the pod, from the Secret's update
	// on: how long until the new password logs in.
	var latency time.Duration
	for attempts := 1; ; attempts++ {
		c, err := sqlconn.Connect(ctx, sqlconn.Target{Host: pod.Status.PodIP, Port: 5432, User: role, Password: newPassword, Database: database})
		if err == nil {
			latency = time.Since(updated)
			_ = c.Close(ctx)
			t.Logf("the new password logged in at attempt %d", attempts)
			break
		}
		require.Less(t, time.Since(updated), 30*time.Second, "the new password never logged in: %v", err)
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("rotation of Secret %s: the new password logs in %s after the Secret's update", secret, latency.Round(time.Millisecond))
	assert.Less(t, latency, 10*time.Second, "rotation within seconds")

	assert.Equal(t, role, query(t, conn, "SELECT current_user"), "the new password through the client Service")
	out, err := psql.Query(ctx, oldConn, "SELECT 1", queryTimeout)
	assert.ErrorContains(t, err, "password authentication failed", "the old password still logs in: %s", out)
	assert.NotContains(t, old, newPassword)

	before, after := held.finish(t)
	assert.Equal(t, before, after, "the session opened before the rotation (same backend pid, same rows)")

	cond := waitCondition(t, db, dbv1.ConditionCredentialsReady, metav1.ConditionTrue, dbv1.ReasonPasswordRotated)
	t.Logf("CredentialsReady: %s", cond.Message)
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: secret}, sec))
	assert.Contains(t, cond.Message, "resourceVersion "+sec.ResourceVersion)
	got := dbtest.Get(t, k8s, db)
	require.NotNil(t, got.Status.Credentials)
	assert.Equal(t, sec.ResourceVersion, got.Status.Credentials.AppliedResourceVersion, "status names the applied version")
	assert.Equal(t, secret, got.Status.Credentials.Secret)

	done, failed := backupNow(t, db, "after-rotation")
	require.False(t, failed, "the backup after the rotation failed: %s", done.Status.Backup.LastFailureMessage)
}

// heldSession is a psql session opened before a rotation, in a client pod.
type heldSession struct {
	done chan struct{}
	out  string
	err  error
}

// holdSession opens a session with conn in a client pod and returns once
// it has answered; the pod then waits until a new login with the same
// (old) password is refused (a login that fails otherwise, a connection
// timed out under load, is tried again), and queries again in the same
// session.
func holdSession(t *testing.T, conn dbtest.Conn) *heldSession {
	t.Helper()
	script := `set -u
coproc PSQL { psql --no-psqlrc --no-password --tuples-only --no-align --set=ON_ERROR_STOP=1 2>&1; }
ask() { echo "$1" >&"${PSQL[1]}"; read -r -t 30 line <&"${PSQL[0]}" && echo "$line"; }
ask "SELECT 'open ' || pg_backend_pid() || ' ' || count(*) FROM items;"
for i in $(seq 1 120); do
	out=$(PGCONNECT_TIMEOUT=5 psql --no-psqlrc --no-password --command='SELECT 1' 2>&1) ||
		case "$out" in *"password authentication failed"*) break ;; esac
	sleep 0.5
done
ask "SELECT 'still ' || pg_backend_pid() || ' ' || count(*) FROM items;"`
	h := &heldSession{done: make(chan struct{})}
	env, target := conn.Env()
	script = strings.ReplaceAll(script, "psql --no-psqlrc", "psql "+target+" --no-psqlrc")
	var once sync.Once
	go func() {
		defer once.Do(func() { close(h.done) })
		h.out, h.err = psql.RunWithCA(context.Background(), conn.Namespace, conn.CA(), env, script, nil, 3*time.Minute)
	}()
	// Wait until the session has answered: the client pod's log says open.
	require.Eventually(t, func() bool {
		pods := &corev1.PodList{}
		if err := k8s.List(context.Background(), pods, client.InNamespace(conn.Namespace),
			client.MatchingLabels{"app.kubernetes.io/name": "dbtest-client"}); err != nil {
			return false
		}
		for _, p := range pods.Items {
			logs, err := psql.Clientset.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
			if err == nil && strings.Contains(string(logs), "open ") {
				return true
			}
		}
		return false
	}, timeout, 500*time.Millisecond, "the held session never opened")
	return h
}

// finish waits for the held session's pod and returns what the session
// said before and after the rotation (backend pid and rows).
func (h *heldSession) finish(t *testing.T) (string, string) {
	t.Helper()
	<-h.done
	require.NoError(t, h.err, "the held session: %s", h.out)
	var before, after string
	for _, line := range strings.Split(h.out, "\n") {
		if v, ok := strings.CutPrefix(line, "open "); ok {
			before = v
		}
		if v, ok := strings.CutPrefix(line, "still "); ok {
			after = v
		}
	}
	require.NotEmpty(t, before, "held session: %s", h.out)
	require.NotEmpty(t, after, "the held session stopped working after the rotation: %s", h.out)
	return before, after
}

// TestRotationRefusesEmptyPassword: an empty password in the user's Secret
// is refused with a message naming the Secret and the key, and the server
// keeps the previous password.
func TestRotationRefusesEmptyPassword(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns)
	login := map[string]string{"username": "shop", "password": "kept-password-of-shop"}
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop-login",
		Annotations: map[string]string{dbv1.AnnotationCredentialsFor: "empty"}}, StringData: login})
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop-login-copy"}, StringData: login})
	db := newDatabase(ns, "empty", "17", func(d *dbv1.Database) {
		d.Spec.Credentials = &dbv1.CredentialsSpec{SecretName: "shop-login"}
	})
	create(t, db)
	waitReady(t, db)
	applied := dbtest.Get(t, k8s, db).Status.Credentials.AppliedResourceVersion

	sec := &corev1.Secret{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop-login"}, sec))
	sec.Data["password"] = []byte{}
	require.NoError(t, k8s.Update(ctx, sec))
	cond := waitCondition(t, db, dbv1.ConditionCredentialsReady, metav1.ConditionFalse, dbv1.ReasonRotationFailed)
	t.Logf("CredentialsReady: %s", cond.Message)
	assert.Contains(t, cond.Message, "Secret shop-login")
	assert.Contains(t, cond.Message, "key password: the password is empty")
	assert.Equal(t, applied, dbtest.Get(t, k8s, db).Status.Credentials.AppliedResourceVersion, "the applied version moved")
	copyConn := dbtest.Conn{Namespace: ns, Secret: "shop-login-copy", Host: resources.ClientServiceHost(db)}
	assert.Equal(t, "shop", queryEventually(t, copyConn, "SELECT current_user"), "the previous password stopped working")
}

// TestDeclaredRoles (issue 32, item 3): a role of spec.roles logs in with
// its Secret's password and reads the application's tables through its
// membership in pg_read_all_data, and its database of spec.databases is
// made with it as the owner, with the extensions it lists (one in the
// schema asked for), which its owner uses; SUPERUSER given by hand is taken back at the
// next reconcile (here the one the Secret's change brings; the periodic
// one comes every 5 minutes), which also sets the Secret's new password
// (the old one is refused after); ensure: Absent drops the database and
// the role, which no longer logs in.
func TestDeclaredRoles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns)
	pw := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reporter-pw",
		Annotations: map[string]string{dbv1.AnnotationCredentialsFor: "declared"}},
		StringData: map[string]string{"password": "first-reporter-pw"}}
	require.NoError(t, k8s.Create(ctx, pw))
	db := newDatabase(ns, "declared", "17", func(d *dbv1.Database) {
		d.Spec.Roles = []dbv1.RoleSpec{{Name: "reporter", PasswordSecret: &dbv1.PasswordSecretRef{Name: "reporter-pw"}, InRoles: []string{"pg_read_all_data"}}}
		d.Spec.Databases = []dbv1.ServerDatabaseSpec{{Name: "reports", Owner: "reporter",
			Extensions: []dbv1.ExtensionSpec{{Name: "vector"}, {Name: "hstore", Schema: "pg_catalog"}}}}
	})
	create(t, db)
	waitReady(t, db)
	cond := waitCondition(t, db, dbv1.ConditionRolesReady, metav1.ConditionTrue, dbv1.ReasonRolesReconciled)
	t.Logf("RolesReady: %s", cond.Message)
	cond = waitCondition(t, db, dbv1.ConditionExtensionsReady, metav1.ConditionTrue, dbv1.ReasonExtensionsReconciled)
	t.Logf("ExtensionsReady: %s", cond.Message)
	assert.Contains(t, cond.Message, "in database reports: vector ")
	fillItems(t, generated(db))

	rw := serviceTarget(t, db, resources.ClientServiceName(db))
	reporter := rw
	reporter.User, reporter.Password = "reporter", "first-reporter-pw"
	assert.Equal(t, "100", sqlValue(t, reporter, "SELECT count(*) FROM items"), "the role reads the application's table (pg_read_all_data)")
	reports := reporter
	reports.Database = "reports"
	assert.Equal(t, "reporter", sqlValue(t, reports, "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()"))
	assert.Equal(t, "1", sqlValue(t, reports, "SELECT '[1,2]'::vector <-> '[1,3]'::vector"), "vector in the database of spec.databases, for its owner")
	assert.Equal(t, "pg_catalog", sqlValue(t, reports, "SELECT extnamespace::regnamespace FROM pg_extension WHERE extname = 'hstore'"), "hstore in the schema asked for")
	assert.Equal(t, "0", sqlValue(t, rw, "SELECT count(*) FROM pg_extension WHERE extname IN ('vector', 'hstore')"), "not in the application's database")

	super := superuserTarget(t, db, rw)
	super.Database = "postgres"
	sqlValue(t, super, "ALTER ROLE reporter SUPERUSER")
	require.Equal(t, "t", sqlValue(t, super, "SELECT rolsuper FROM pg_roles WHERE rolname = 'reporter'"))
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(pw), pw))
	pw.Data, pw.StringData = nil, map[string]string{"password": "second-reporter-pw"}
	require.NoError(t, k8s.Update(ctx, pw))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, "f", sqlValueOnce(ct, super, "SELECT rolsuper FROM pg_roles WHERE rolname = 'reporter'"), "SUPERUSER by hand taken back")
		second := reporter
		second.Password = "second-reporter-pw"
		_, err := sqlOnce(second, "SELECT 1")
		assert.NoError(ct, err, "the Secret's new password")
	}, timeout, time.Second)
	_, err := sqlOnce(reporter, "SELECT 1")
	require.Error(t, err, "the old password still logs in")
	assert.Contains(t, err.Error(), "password authentication failed")

	dbtest.Patch(t, k8s, db, func(d *dbv1.Database) {
		d.Spec.Roles[0].Ensure = dbv1.EnsureAbsent
		// an Absent database names no owner (admission: only a Present
		// role may own one)
		d.Spec.Databases[0] = dbv1.ServerDatabaseSpec{Name: "reports", Ensure: dbv1.EnsureAbsent}
	})
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, "0|0", sqlValueOnce(ct, super, "SELECT (SELECT count(*) FROM pg_roles WHERE rolname = 'reporter') || '|' || (SELECT count(*) FROM pg_database WHERE datname = 'reports')"))
	}, timeout, time.Second, "the Absent role and database are dropped")
	second := reporter
	second.Password = "second-reporter-pw"
	_, err = sqlOnce(second, "SELECT 1")
	require.Error(t, err, "a dropped role logs in")
	assert.Equal(t, "100", sqlValue(t, rw, "SELECT count(*) FROM items"), "the application's rows stay")
}

// sqlValueOnce is sqlOnce for an EventuallyWithT: an error is the tick's
// failure.
func sqlValueOnce(ct *assert.CollectT, target sqlconn.Target, sql string) string {
	v, err := sqlOnce(target, sql)
	assert.NoError(ct, err, sql)
	return v
}
