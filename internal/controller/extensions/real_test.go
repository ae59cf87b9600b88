package extensions

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/test/framework/postgres"
)

// fixture is a Database whose primary is a local server (the host's
// PostgreSQL, with contrib and without pgvector), with its superuser and
// credentials Secrets and the application's role and database.
type fixture struct {
	t   *testing.T
	ctx context.Context
	srv *postgres.Server
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
	return &fixture{t: t, ctx: ctx, srv: srv, db: db, s: &syncer{secrets: c, instances: srv.Connector()}}
}

func (f *fixture) sync() facet.Outcome {
	f.t.Helper()
	out, err := f.s.Sync(f.ctx, f.db)
	require.NoError(f.t, err)
	f.t.Logf("ExtensionsReady %s %s: %s", out.Condition.Status, out.Condition.Reason, out.Condition.Message)
	return out
}

// asApp runs sql as the application's role and returns the last line of
// what it printed.
func (f *fixture) asApp(sql string) string {
	f.t.Helper()
	out := strings.Split(f.srv.SQL(f.t, "app", "SET ROLE app; "+sql), "\n")
	return out[len(out)-1]
}

// installed is "name version" of each extension of the application's
// database but plpgsql, sorted.
func (f *fixture) installed() string {
	f.t.Helper()
	return f.srv.SQL(f.t, "app", "SELECT COALESCE(string_agg(extname || ' ' || extversion, ',' ORDER BY extname), '') FROM pg_extension WHERE extname <> 'plpgsql'")
}

// TestExtensionsOnARealServer: an extension the image has is created in
// the application's database and usable by the application's role,
// which stays no superuser; one the image lacks, or at a version it lacks,
// is named and nothing is half-created; one whose library is not
// preloaded waits; a pinned version is created and updated; one dropped
// by hand comes back; an Absent one that a table depends on is not
// dropped (the table keeps its rows) and is once nothing depends on it;
// one that leaves the spec stays.
func TestExtensionsOnARealServer(t *testing.T) {
	f := newFixture(t, postgres.Options{})
	f.db.Spec.PostgreSQL.Extensions = []dbv1.ExtensionSpec{
		{Name: "hstore", Version: "1.7"},
		{Name: "pg_stat_statements"},
		{Name: "vector"},
		{Name: "citext", Version: "9.9"},
	}
	out := f.sync()
	assert.Equal(t, metav1.ConditionFalse, out.Condition.Status)
	assert.Equal(t, dbv1.ReasonExtensionUnavailable, out.Condition.Reason, "what the user must fix first")
	assert.Contains(t, out.Condition.Message, "spec.postgresql.extensions[2] (vector): the image of PostgreSQL")
	assert.Contains(t, out.Condition.Message, "does not have extension vector")
	assert.Contains(t, out.Condition.Message, "spec.postgresql.extensions[3] (citext): the image has extension citext at versions")
	assert.Contains(t, out.Condition.Message, "not 9.9")
	assert.Contains(t, out.Condition.Message, "spec.postgresql.extensions[1] (pg_stat_statements): waiting for the restart that loads library pg_stat_statements")
	assert.Equal(t, 30*time.Second, out.RequeueAfter)
	assert.Equal(t, "hstore 1.7", f.installed(), "only what can be kept is created")

	t.Log("the application's role uses it, and is still no superuser")
	f.asApp("CREATE TABLE kv (id int PRIMARY KEY, h hstore); INSERT INTO kv VALUES (1, 'a=>1'), (2, 'b=>2')")
	assert.Equal(t, "1", f.asApp("SELECT h -> 'a' FROM kv WHERE id = 1"))
	assert.Equal(t, "f", f.srv.SQL(t, "postgres", "SELECT rolsuper FROM pg_roles WHERE rolname = 'app'"))

	t.Log("the version moves forward")
	f.db.Spec.PostgreSQL.Extensions = []dbv1.ExtensionSpec{{Name: "hstore", Version: "1.8"}, {Name: "citext"}}
	out = f.sync()
	assert.Equal(t, dbv1.ReasonExtensionsReconciled, out.Condition.Reason, out.Condition.Message)
	assert.Equal(t, "citext "+f.srv.SQL(t, "app", "SELECT default_version FROM pg_available_extensions WHERE name = 'citext'")+",hstore 1.8", f.installed())
	assert.Contains(t, out.Condition.Message, "in database app: hstore 1.8, citext ")
	assert.Equal(t, 5*time.Minute, out.RequeueAfter)

	t.Log("dropped by hand: created again")
	f.srv.SQL(t, "app", "DROP EXTENSION citext")
	f.sync()
	assert.Contains(t, f.installed(), "citext ")

	t.Log("Absent while a table depends on it: refused, the rows stay")
	f.db.Spec.PostgreSQL.Extensions = []dbv1.ExtensionSpec{{Name: "hstore", Ensure: dbv1.EnsureAbsent}, {Name: "citext"}}
	out = f.sync()
	assert.Equal(t, dbv1.ReasonExtensionRefused, out.Condition.Reason)
	assert.Contains(t, out.Condition.Message, "spec.postgresql.extensions[0] (hstore): the server refused the statement that would have dropped extension hstore")
	assert.Contains(t, out.Condition.Message, "depend")
	assert.Contains(t, out.Condition.Message, "kv")
	assert.Contains(t, f.installed(), "hstore 1.8")
	assert.Equal(t, "2", f.srv.SQL(t, "app", "SELECT count(*) FROM kv"))

	t.Log("nothing depends on it any more: dropped")
	f.srv.SQL(t, "app", "DROP TABLE kv")
	out = f.sync()
	assert.Equal(t, dbv1.ReasonExtensionsReconciled, out.Condition.Reason, out.Condition.Message)
	assert.Contains(t, out.Condition.Message, "not there (ensure: Absent): hstore")
	assert.NotContains(t, f.installed(), "hstore")

	t.Log("left the spec: left as it is")
	f.db.Spec.PostgreSQL.Extensions = []dbv1.ExtensionSpec{{Name: "hstore", Ensure: dbv1.EnsureAbsent}}
	f.sync()
	assert.Contains(t, f.installed(), "citext ", "an extension that leaves the list is not dropped")

	f.db.Spec.PostgreSQL.Extensions = nil
	out = f.sync()
	assert.Equal(t, dbv1.ReasonExtensionsReconciled, out.Condition.Reason)
}

// TestPreloadedExtension: once the server runs with the library in
// shared_preload_libraries, pg_stat_statements is created and records
// the application's statements.
func TestPreloadedExtension(t *testing.T) {
	f := newFixture(t, postgres.Options{Prepare: func(string, int, int) []string {
		return []string{"-c", "shared_preload_libraries=pg_stat_statements"}
	}})
	f.db.Spec.PostgreSQL.Extensions = []dbv1.ExtensionSpec{{Name: "pg_stat_statements"}}
	out := f.sync()
	assert.Equal(t, dbv1.ReasonExtensionsReconciled, out.Condition.Reason, out.Condition.Message)
	assert.Contains(t, f.installed(), "pg_stat_statements ")
	f.asApp("SELECT 4242 AS dbkeeper_probe")
	assert.Equal(t, "1", f.asApp("SELECT count(*) FROM pg_stat_statements WHERE query LIKE '%dbkeeper_probe%' AND query NOT LIKE '%pg_stat_statements%'"))
}

// TestBeforeTheApplicationsDatabase: while the application's database is
// not there yet (the secret controller makes it once the server runs),
// ExtensionsReady waits for it, by name, with the growing retry delay, not
// an error.
func TestBeforeTheApplicationsDatabase(t *testing.T) {
	f := newFixture(t, postgres.Options{})
	f.srv.SQL(t, "postgres", "DROP DATABASE app")
	f.db.Spec.PostgreSQL.Extensions = []dbv1.ExtensionSpec{{Name: "hstore"}}
	out := f.sync()
	assert.Equal(t, dbv1.ReasonExtensionsWaitingForPrimary, out.Condition.Reason)
	assert.Contains(t, out.Condition.Message, "the application's database app is not there yet")
	assert.Equal(t, facet.BackoffFirst, out.RequeueAfter)
	f.srv.SQL(t, "postgres", "CREATE DATABASE app OWNER app")
	out = f.sync()
	assert.Equal(t, dbv1.ReasonExtensionsReconciled, out.Condition.Reason, out.Condition.Message)
}

// TestExtensionsOfListedDatabases: the extensions of a database of
// spec.databases wait for that database (the roles controller creates
// it), by name; then they are created there, in the schema asked for, and
// moved when the schema changes, beside the application's database's own;
// a database that is Absent is left alone.
func TestExtensionsOfListedDatabases(t *testing.T) {
	f := newFixture(t, postgres.Options{})
	f.db.Spec.PostgreSQL.Extensions = []dbv1.ExtensionSpec{{Name: "citext"}}
	f.db.Spec.Databases = []dbv1.ServerDatabaseSpec{
		{Name: "gone", Ensure: dbv1.EnsureAbsent, Extensions: []dbv1.ExtensionSpec{{Name: "hstore"}}},
		{Name: "reports", Extensions: []dbv1.ExtensionSpec{{Name: "hstore", Schema: "ext"}}},
	}
	out := f.sync()
	assert.Equal(t, dbv1.ReasonExtensionsWaitingForDatabase, out.Condition.Reason)
	assert.Contains(t, out.Condition.Message, "spec.databases[1].extensions: database reports is not on the server yet")
	assert.NotContains(t, out.Condition.Message, "gone")
	assert.Contains(t, f.installed(), "citext ", "the application's database is kept meanwhile")

	f.srv.SQL(t, "postgres", "CREATE DATABASE reports OWNER app")
	f.srv.SQL(t, "reports", "CREATE SCHEMA ext")
	out = f.sync()
	assert.Equal(t, dbv1.ReasonExtensionsReconciled, out.Condition.Reason, out.Condition.Message)
	assert.Contains(t, out.Condition.Message, "in database app: citext ")
	assert.Contains(t, out.Condition.Message, "in database reports: hstore ")
	schemaOf := func() string {
		return f.srv.SQL(t, "reports", "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'hstore'")
	}
	assert.Equal(t, "ext", schemaOf())
	assert.NotContains(t, f.installed(), "hstore", "only in the database that lists it")

	t.Log("another schema: moved")
	f.db.Spec.Databases[1].Extensions[0].Schema = "public"
	out = f.sync()
	assert.Equal(t, dbv1.ReasonExtensionsReconciled, out.Condition.Reason, out.Condition.Message)
	assert.Equal(t, "public", schemaOf())

	t.Log("a schema that does not exist: PostgreSQL's refusal, named")
	f.db.Spec.Databases[1].Extensions[0].Schema = "nowhere"
	out = f.sync()
	assert.Equal(t, dbv1.ReasonExtensionRefused, out.Condition.Reason)
	assert.Contains(t, out.Condition.Message, "spec.databases[1].extensions[0] (hstore): the server refused the statement that would have moved extension hstore from schema public to nowhere")
	assert.Equal(t, "public", schemaOf())
}
