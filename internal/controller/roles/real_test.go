package roles

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
	"github.com/dbkeeper/dbkeeper/test/framework/postgres"
)

// fixture is a Database whose primary is a local server, with its
// credentials and superuser Secrets and the application's role, as the
// secret controller leaves them.
type fixture struct {
	t   *testing.T
	ctx context.Context
	srv *postgres.Server
	c   client.Client
	db  *dbv1.Database
	s   *syncer
}

func newFixture(t *testing.T, o postgres.Options) *fixture {
	t.Helper()
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped under -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	srv := postgres.StartWith(t, o)
	db := facettest.Database()
	c := facettest.Client(t, append(srv.AppPrimary(t, db), db)...)
	return &fixture{t: t, ctx: ctx, srv: srv, c: c, db: db, s: &syncer{secrets: c, instances: srv.Connector()}}
}

// passwordSecret creates or updates the Secret name with the key
// password, consenting to the Database's use.
func (f *fixture) passwordSecret(name, pw string) {
	f.t.Helper()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.db.Namespace, Name: name,
		Annotations: map[string]string{dbv1.AnnotationCredentialsFor: f.db.Name}}, Data: map[string][]byte{"password": []byte(pw)}}
	if err := f.c.Create(f.ctx, sec); err != nil {
		require.NoError(f.t, f.c.Update(f.ctx, sec))
	}
}

// sync runs the controller once and keeps status.roles as the API server
// would.
func (f *fixture) sync() facet.Outcome {
	f.t.Helper()
	out, err := f.s.Sync(f.ctx, f.db)
	require.NoError(f.t, err)
	f.db.Status.Roles = nil
	if out.Status != nil && out.Status.Roles != nil {
		r := out.Status.Roles
		f.db.Status.Roles = &dbv1.RolesStatus{Roles: r.Roles, Databases: r.Databases, ReleasedRoles: r.ReleasedRoles, ReleasedDatabases: r.ReleasedDatabases}
	}
	f.t.Logf("RolesReady %s %s: %s", out.Condition.Status, out.Condition.Reason, out.Condition.Message)
	return out
}

func (f *fixture) sql(database, sql string) string {
	f.t.Helper()
	return f.srv.SQL(f.t, database, sql)
}

func (f *fixture) login(user, pw, database string) error {
	c, err := sqlconn.Connect(f.ctx, sqlconn.Target{Host: "127.0.0.1", Port: int32(f.srv.Port), User: user, Password: pw, Database: database})
	if err == nil {
		_ = c.Close(f.ctx)
	}
	return err
}

// TestRolesOnARealServer: the roles and databases of the spec are made
// with their attributes, memberships and passwords; a converged server is
// not written; a changed Secret changes the password (the old one is
// refused); a role altered by hand (SUPERUSER, its limit, a membership) is
// put back; a database that leaves the spec keeps its rows; an Absent
// database with a session is not dropped and RolesReady says why, then
// is dropped once the session is gone; an Absent role that holds
// privileges loses them and goes, one that owns a table stays.
func TestRolesOnARealServer(t *testing.T) {
	f := newFixture(t, postgres.Options{Prepare: func(string, int, int) []string {
		return []string{"-c", "log_statement=all"}
	}})
	f.passwordSecret("reader-pw", "first-reader-pw")
	f.db.Spec.Roles = []dbv1.RoleSpec{
		{Name: "reader", PasswordSecret: &dbv1.PasswordSecretRef{Name: "reader-pw"}, ConnectionLimit: ptr.To[int32](3),
			InRoles: []string{"pg_read_all_data", "readers"}},
		{Name: "readers", Login: ptr.To(false)},
		{Name: "ops", Superuser: true, CreateDB: true},
	}
	f.db.Spec.Databases = []dbv1.ServerDatabaseSpec{{Name: "reports", Owner: "reader"}, {Name: "scratch"}}

	out := f.sync()
	assert.Equal(t, metav1.ConditionFalse, out.Condition.Status)
	assert.Equal(t, dbv1.ReasonRoleRefused, out.Condition.Reason)
	assert.Contains(t, out.Condition.Message, "spec.roles[2].superuser is true")
	assert.Equal(t, "reader|t|3|f|f", f.sql("postgres", "SELECT rolname, rolcanlogin, rolconnlimit, rolsuper, rolcreatedb FROM pg_roles WHERE rolname = 'reader'"))
	assert.Equal(t, "readers|f", f.sql("postgres", "SELECT rolname, rolcanlogin FROM pg_roles WHERE rolname = 'readers'"))
	assert.Equal(t, "ops|f|t", f.sql("postgres", "SELECT rolname, rolsuper, rolcreatedb FROM pg_roles WHERE rolname = 'ops'"), "kept without SUPERUSER")
	assert.Equal(t, "pg_read_all_data,readers", f.sql("postgres",
		"SELECT string_agg(g.rolname, ',' ORDER BY g.rolname) FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid JOIN pg_roles u ON u.oid = m.member WHERE u.rolname = 'reader'"))
	assert.Equal(t, "reports|reader\nscratch|app", f.sql("postgres",
		"SELECT datname, pg_get_userbyid(datdba) FROM pg_database WHERE datname IN ('reports', 'scratch') ORDER BY 1"))
	require.NoError(t, f.login("reader", "first-reader-pw", "reports"), "the Secret's password")
	assert.Equal(t, []string{"ops", "reader", "readers"}, f.db.Status.Roles.Roles)

	t.Log("privileged roles allowed by the administrator")
	f.s.allowPrivileged = true
	out = f.sync()
	assert.Equal(t, dbv1.ReasonRolesReconciled, out.Condition.Reason, out.Condition.Message)
	assert.Equal(t, "t", f.sql("postgres", "SELECT rolsuper FROM pg_roles WHERE rolname = 'ops'"))
	f.s.allowPrivileged = false
	f.db.Spec.Roles[2].Superuser = false

	t.Log("converged: nothing written")
	out = f.sync()
	assert.Equal(t, dbv1.ReasonRolesReconciled, out.Condition.Reason, out.Condition.Message)
	xmins := "SELECT string_agg(rolname || ':' || xmin::text, ',' ORDER BY rolname) FROM pg_authid WHERE rolname IN ('reader', 'readers', 'ops')"
	before := f.sql("postgres", xmins)
	out = f.sync()
	assert.Equal(t, dbv1.ReasonRolesReconciled, out.Condition.Reason)
	assert.Equal(t, before, f.sql("postgres", xmins), "a server in line is not written")
	assert.Equal(t, resyncAfter, out.RequeueAfter)

	t.Log("the Secret changes: the new password works, the old one is refused")
	f.passwordSecret("reader-pw", "second-reader-pw")
	out = f.sync()
	assert.Equal(t, dbv1.ReasonRolesReconciled, out.Condition.Reason)
	assert.ErrorContains(t, f.login("reader", "first-reader-pw", "reports"), "password authentication failed")
	require.NoError(t, f.login("reader", "second-reader-pw", "reports"))

	t.Log("changed by hand: put back")
	f.sql("postgres", "ALTER ROLE reader SUPERUSER CONNECTION LIMIT 50; GRANT pg_write_all_data TO reader; ALTER ROLE readers LOGIN")
	out = f.sync()
	assert.Equal(t, dbv1.ReasonRolesReconciled, out.Condition.Reason)
	assert.Equal(t, "f|3", f.sql("postgres", "SELECT rolsuper, rolconnlimit FROM pg_roles WHERE rolname = 'reader'"))
	assert.Equal(t, "f", f.sql("postgres", "SELECT rolcanlogin FROM pg_roles WHERE rolname = 'readers'"))
	assert.Equal(t, "f", f.sql("postgres", "SELECT pg_has_role('reader', 'pg_write_all_data', 'MEMBER')"))

	t.Log("a database that leaves the spec keeps its rows")
	f.sql("reports", "CREATE TABLE sales (id int); INSERT INTO sales SELECT generate_series(1, 10)")
	f.db.Spec.Databases = []dbv1.ServerDatabaseSpec{{Name: "scratch"}}
	out = f.sync()
	assert.Equal(t, dbv1.ReasonRolesReconciled, out.Condition.Reason)
	assert.Contains(t, out.Condition.Message, "left on the server as they are since they left the spec: database reports")
	assert.Equal(t, []string{"reports"}, f.db.Status.Roles.ReleasedDatabases)
	assert.Equal(t, "10", f.sql("reports", "SELECT count(*) FROM sales"))

	t.Log("an Absent database with a session is not dropped")
	session, err := sqlconn.Connect(f.ctx, sqlconn.Target{Host: "127.0.0.1", Port: int32(f.srv.Port), User: "reader", Password: "second-reader-pw", Database: "scratch"})
	require.NoError(t, err)
	f.db.Spec.Databases[0].Ensure = dbv1.EnsureAbsent
	out = f.sync()
	assert.Equal(t, metav1.ConditionFalse, out.Condition.Status)
	assert.Equal(t, dbv1.ReasonDropRefused, out.Condition.Reason)
	assert.Contains(t, out.Condition.Message, "spec.databases[0] (scratch): database scratch is not dropped while sessions are connected to it (1, of role reader)")
	assert.Equal(t, retryAfter, out.RequeueAfter)
	assert.Equal(t, "1", f.sql("postgres", "SELECT count(*) FROM pg_database WHERE datname = 'scratch'"))
	require.NoError(t, session.Close(f.ctx))
	require.Eventually(t, func() bool {
		return f.sql("postgres", "SELECT count(*) FROM pg_stat_activity WHERE datname = 'scratch'") == "0"
	}, 10*time.Second, 50*time.Millisecond)
	out = f.sync()
	assert.Equal(t, dbv1.ReasonRolesReconciled, out.Condition.Reason, out.Condition.Message)
	assert.Equal(t, "0", f.sql("postgres", "SELECT count(*) FROM pg_database WHERE datname = 'scratch'"))

	t.Log("Absent roles: one with privileges goes, one that owns a table stays")
	f.sql("reports", "GRANT SELECT ON sales TO readers; CREATE TABLE owned (id int); ALTER TABLE owned OWNER TO ops")
	f.db.Spec.Roles = []dbv1.RoleSpec{
		{Name: "reader", PasswordSecret: &dbv1.PasswordSecretRef{Name: "reader-pw"}, ConnectionLimit: ptr.To[int32](3), InRoles: []string{"pg_read_all_data"}},
		{Name: "readers", Ensure: dbv1.EnsureAbsent},
		{Name: "ops", Ensure: dbv1.EnsureAbsent},
	}
	out = f.sync()
	assert.Equal(t, dbv1.ReasonDropRefused, out.Condition.Reason)
	assert.Contains(t, out.Condition.Message, "spec.roles[2] (ops): role ops is not dropped while it owns 1 object in database reports")
	assert.Equal(t, "0|1", f.sql("postgres", "SELECT (SELECT count(*) FROM pg_roles WHERE rolname = 'readers') || '|' || (SELECT count(*) FROM pg_roles WHERE rolname = 'ops')"))
	assert.Equal(t, "10|0", f.sql("reports", "SELECT (SELECT count(*) FROM sales) || '|' || (SELECT count(*) FROM owned)"), "nothing of the data went")

	log := f.srv.Log()
	assert.Contains(t, log, "CREATE ROLE", "the server logs statements")
	for _, secret := range []string{"SCRAM-SHA-256$", "first-reader-pw", "second-reader-pw"} {
		assert.NotContains(t, log, secret, "the server log holds %q", secret)
	}
}

// TestRolesPasswordSecrets: a passwordSecret that is missing, does not
// consent, or lacks its key is said, and the role is made without a
// password; the rest applies.
func TestRolesPasswordSecrets(t *testing.T) {
	f := newFixture(t, postgres.Options{})
	require.NoError(t, f.c.Create(f.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.db.Namespace, Name: "foreign"},
		Data: map[string][]byte{"password": []byte("not-yours")}}))
	f.passwordSecret("keyless", "x")
	f.db.Spec.Roles = []dbv1.RoleSpec{
		{Name: "a", PasswordSecret: &dbv1.PasswordSecretRef{Name: "nowhere"}},
		{Name: "b", PasswordSecret: &dbv1.PasswordSecretRef{Name: "foreign"}},
		{Name: "c", PasswordSecret: &dbv1.PasswordSecretRef{Name: "keyless", Key: "other"}},
		{Name: "d"},
	}
	out := f.sync()
	assert.Equal(t, dbv1.ReasonPasswordSecretNotOptedIn, out.Condition.Reason)
	msg := out.Condition.Message
	assert.Contains(t, msg, "spec.roles[1] (b): Secret foreign named in passwordSecret does not say this Database may use it: add the annotation database.dbkeeper.io/credentials-for: orders to it")
	assert.Contains(t, msg, "spec.roles[0] (a): Secret nowhere named in passwordSecret does not exist: create it with the key password")
	assert.Contains(t, msg, "spec.roles[2] (c): Secret keyless named in passwordSecret has no key other")
	assert.NotContains(t, msg, "not-yours")
	assert.Equal(t, "a,b,c,d", f.sql("postgres", "SELECT string_agg(rolname, ',' ORDER BY rolname) FROM pg_authid WHERE rolname IN ('a', 'b', 'c', 'd') AND rolpassword IS NULL"))
}

// TestRolesQuotingOnARealServer: a name with a double quote, which
// admission refuses, is one identifier in every statement the planner
// writes: made, given a database, and dropped again.
func TestRolesQuotingOnARealServer(t *testing.T) {
	f := newFixture(t, postgres.Options{})
	odd := `a"b; DROP ROLE app; --`
	login, err := instance.SuperuserLogin(f.ctx, f.c, f.db)
	require.NoError(t, err)
	conn, err := f.s.instances.Connect(f.ctx, f.db, login, "")
	require.NoError(t, err)
	defer conn.Close(f.ctx)
	run := func(w desired) {
		t.Helper()
		roles, databases := lookedAt(w)
		seen, err := observe(f.ctx, conn, roles, databases)
		require.NoError(t, err)
		p := planFor(w, seen)
		require.Empty(t, p.problems)
		_, problems, err := f.s.apply(f.ctx, f.db, conn, login, p)
		require.NoError(t, err)
		require.Empty(t, problems)
	}
	w := want([]dbv1.RoleSpec{{Name: odd, InRoles: []string{"pg_monitor"}}}, dbv1.ServerDatabaseSpec{Name: odd, Owner: odd})
	run(w)
	assert.Equal(t, odd+"|"+odd, f.sql("postgres", "SELECT datname || '|' || pg_get_userbyid(datdba) FROM pg_database WHERE datname LIKE 'a\"b%'"))
	assert.Equal(t, "t", f.sql("postgres", "SELECT pg_has_role('"+strings.ReplaceAll(odd, "'", "''")+"', 'pg_monitor', 'MEMBER')"))
	run(want([]dbv1.RoleSpec{{Name: odd, Ensure: dbv1.EnsureAbsent}}, dbv1.ServerDatabaseSpec{Name: odd, Ensure: dbv1.EnsureAbsent}))
	assert.Equal(t, "0|1", f.sql("postgres", "SELECT (SELECT count(*) FROM pg_roles WHERE rolname LIKE 'a\"b%') || '|' || (SELECT count(*) FROM pg_roles WHERE rolname = 'app')"))
}
