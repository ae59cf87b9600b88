package realnode

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

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
)

// TestParameters: spec.postgresql.parameters on a Database of two
// instances with a writer running. A value and a name PostgreSQL refuses
// are named in ConfigurationReady with PostgreSQL's message while the
// others are applied and no server restarts; a reload-only parameter takes
// effect on both instances with no restart (the postmasters' start times
// unchanged); a restart-only one rolls out (standby, one switchover, the
// former primary) and takes effect on both; a lowered max_connections
// reaches both instances (the primary restarted in place first, as
// PostgreSQL requires); spec.postgresql.extensions preloads
// pg_stat_statements (one more rollout) and creates it and vector, which
// the application (no superuser) uses for a similarity query that
// pg_stat_statements then shows, and the primary's agent, scraped as the
// manager scrapes it, among its top statements
// (spec.monitoring.topStatements); pgaudit,
// preloaded in the same rollout, logs the application's DDL; with no
// failover and no acknowledged write lost.
func TestParameters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns)
	db := newDatabase(ns, "tuned", "17", func(d *dbv1.Database) {
		d.Spec.Replicas = ptr.To[int32](2)
		d.Spec.PostgreSQL.Parameters = map[string]dbv1.ParameterValue{"work_mem": "8MB"}
	})
	create(t, db)
	waitReady(t, db)
	p0, p1 := resources.InstanceName(db, 0), resources.InstanceName(db, 1)
	waitTopology(t, db, p0, 2)
	waitCondition(t, db, dbv1.ConditionConfigurationReady, metav1.ConditionTrue, dbv1.ReasonParametersApplied)
	rw := serviceTarget(t, db, resources.ClientServiceName(db))
	w, err := dbtest.StartWriterWithTimeout(ctx, rw, "acks", 5*time.Second)
	require.NoError(t, err)
	defer w.Stop()
	// query runs sql on each instance, straight from its pod; an
	// instance that does not answer (restarting) reads as its error
	query := func(sql string) map[string]string {
		out := map[string]string{}
		for _, p := range []string{p0, p1} {
			target, err := podTargetOf(db, p)
			var v string
			if err == nil {
				v, err = sqlOnce(target, sql)
			}
			if err != nil {
				v = "error: " + err.Error()
			}
			out[p] = v
		}
		return out
	}
	show := func(setting string) map[string]string { return query("SHOW " + setting) }
	// started is when each instance's postmaster started
	started := func() map[string]string { return query("SELECT pg_postmaster_start_time()::text") }
	assert.Equal(t, map[string]string{p0: "8MB", p1: "8MB"}, show("work_mem"), "the parameter of the new Database on both instances")
	start := started()

	setParameters := func(p map[string]dbv1.ParameterValue) {
		dbtest.Patch(t, k8s, db, func(d *dbv1.Database) { d.Spec.PostgreSQL.Parameters = p })
	}

	t.Log("a wrong unit and an unknown name: named with PostgreSQL's message, the others applied, no restart")
	setParameters(map[string]dbv1.ParameterValue{"work_mem": "1XB", "no_such_parameter": "1", "log_min_duration_statement": "250ms"})
	cond := waitCondition(t, db, dbv1.ConditionConfigurationReady, metav1.ConditionFalse, dbv1.ReasonParameterRefused)
	t.Logf("ConfigurationReady: %s", cond.Message)
	assert.Contains(t, cond.Message, `spec.postgresql.parameters.work_mem: invalid value for parameter "work_mem": "1XB"`)
	assert.Contains(t, cond.Message, `spec.postgresql.parameters.no_such_parameter: unrecognized configuration parameter "no_such_parameter"`)
	assert.NotContains(t, cond.Message, "log_min_duration_statement")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, map[string]string{p0: "250ms", p1: "250ms"}, show("log_min_duration_statement"))
	}, timeout, time.Second, "the parameter PostgreSQL took is applied beside the refused ones")
	assert.Equal(t, map[string]string{p0: "8MB", p1: "8MB"}, show("work_mem"), "a refused value leaves the parameter as it was")

	t.Log("a reload-only parameter: applied on both instances, no restart")
	setParameters(map[string]dbv1.ParameterValue{"work_mem": "16MB"})
	waitCondition(t, db, dbv1.ConditionConfigurationReady, metav1.ConditionTrue, dbv1.ReasonParametersApplied)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, map[string]string{p0: "16MB", p1: "16MB"}, show("work_mem"))
		assert.Equal(ct, map[string]string{p0: "0", p1: "0"},
			query("SELECT count(*) FROM pg_settings WHERE name = 'log_min_duration_statement' AND source <> 'default'"),
			"a parameter removed from the spec is reset")
	}, timeout, time.Second)
	assert.Equal(t, start, started(), "a reload-only change restarted a server")
	acks := w.AckCount()
	require.Eventually(t, func() bool { return w.AckCount() > acks+20 }, timeout, 50*time.Millisecond, "writes go on")

	t.Log("a restart-only parameter: rolled out, standby first, one switchover")
	before := dbtest.Get(t, k8s, db).Status.Replication
	changedAt := time.Now()
	setParameters(map[string]dbv1.ParameterValue{"work_mem": "16MB", "shared_buffers": "64MB"})
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		live := dbtest.Get(ct, k8s, db)
		if assert.NotNil(ct, live.Status.Configuration) {
			assert.NotEmpty(ct, live.Status.Configuration.RestartRevision)
		}
	}, timeout, time.Second, "status.configuration.restartRevision once both instances wrote shared_buffers")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, map[string]string{p0: "64MB", p1: "64MB"}, show("shared_buffers"))
	}, 2*timeout, 2*time.Second, "shared_buffers on both instances after the rollout")
	after := waitTopology(t, db, "", 2).Status.Replication
	cond = waitCondition(t, db, dbv1.ConditionConfigurationReady, metav1.ConditionTrue, dbv1.ReasonParametersApplied)
	t.Logf("ConfigurationReady after the rollout: %s", cond.Message)
	assert.Empty(t, dbtest.Get(t, k8s, db).Status.Configuration.PendingRestart)
	now := started()
	assert.NotEqual(t, start[p0], now[p0], "%s restarted", p0)
	assert.NotEqual(t, start[p1], now[p1], "%s restarted", p1)
	assert.Equal(t, before.LastFailover, after.LastFailover, "a rollout failed over")
	assert.NotEqual(t, before.CurrentPrimary, after.CurrentPrimary, "the primary handed over once (a switchover)")
	gap := w.LongestGap(changedAt)
	t.Logf("MEASURED parameters: restart-only rollout done in %s, longest write gap %s", time.Since(changedAt).Round(time.Second), gap.Round(time.Millisecond))
	assert.Less(t, gap, 15*time.Second, "writes paused for a switchover only")

	t.Log("max_connections lowered: the standbys keep their primary's until it restarted with the lower value (in place), then take it")
	lowered := time.Now()
	setParameters(map[string]dbv1.ParameterValue{"work_mem": "16MB", "shared_buffers": "64MB", "max_connections": "80"})
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, map[string]string{p0: "80", p1: "80"}, show("max_connections"))
		live := dbtest.Get(ct, k8s, db)
		c := findCondition(live, dbv1.ConditionConfigurationReady)
		if assert.NotNil(ct, c) {
			assert.Equal(ct, dbv1.ReasonParametersApplied, c.Reason, c.Message)
		}
	}, 3*timeout, 2*time.Second, "max_connections 80 on both instances")
	final := waitTopology(t, db, "", 2).Status.Replication
	assert.Equal(t, before.LastFailover, final.LastFailover, "lowering max_connections failed over")
	assert.True(t, eventSince(t, db, "RestartedInPlace", lowered), "the primary restarted in place (an Event RestartedInPlace)")
	t.Logf("MEASURED parameters: max_connections lowered on both instances in %s, longest write gap %s", time.Since(lowered).Round(time.Second), w.LongestGap(lowered).Round(time.Millisecond))
	assert.Less(t, w.LongestGap(lowered), 15*time.Second, "writes paused for a switchover or an in-place restart only")

	t.Log("extensions: vector at once, pg_stat_statements once the restart that preloads its library rolled out")
	preload := time.Now()
	dbtest.Patch(t, k8s, db, func(d *dbv1.Database) {
		d.Spec.PostgreSQL.Extensions = []dbv1.ExtensionSpec{{Name: "vector"}, {Name: "pg_stat_statements"}, {Name: "pgaudit"}}
		d.Spec.PostgreSQL.Parameters["pgaudit.log"] = "ddl"
		d.Spec.Monitoring.TopStatements = agentapi.MaxTopStatements
	})
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		c := findCondition(dbtest.Get(ct, k8s, db), dbv1.ConditionExtensionsReady)
		if assert.NotNil(ct, c) {
			assert.Equal(ct, dbv1.ReasonExtensionsReconciled, c.Reason, c.Message)
			assert.Contains(ct, c.Message, "pg_stat_statements ")
		}
	}, 3*timeout, 2*time.Second, "ExtensionsReady once both extensions are created")
	t.Logf("MEASURED extensions: created (with the preload rollout) in %s", time.Since(preload).Round(time.Second))
	// the extension is created once the primary (after the switchover)
	// preloads the library; the former primary restarts last
	assert.Equal(t, before.LastFailover, waitTopology(t, db, "", 2).Status.Replication.LastFailover, "the preload rollout failed over")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, map[string]string{p0: "pg_stat_statements, pgaudit", p1: "pg_stat_statements, pgaudit"}, show("shared_preload_libraries"))
	}, timeout, time.Second, "both instances preload the library")
	t.Logf("MEASURED extensions: preload rollout done on both instances in %s, longest write gap %s", time.Since(preload).Round(time.Second), w.LongestGap(preload).Round(time.Millisecond))
	assert.Less(t, w.LongestGap(preload), 15*time.Second, "writes paused for a switchover only")

	t.Log("the application, no superuser, uses vector and sees its own statements in pg_stat_statements")
	for _, sql := range []string{
		"CREATE TABLE items (id int PRIMARY KEY, embedding vector(3))",
		"INSERT INTO items VALUES (1, '[1,2,3]'), (2, '[3,1,2]'), (3, '[9,9,9]')",
	} {
		_, err := sqlOnce(rw, sql)
		require.NoError(t, err, sql)
	}
	nearest, err := sqlOnce(rw, "SELECT id FROM items ORDER BY embedding <-> '[3,1,1]' LIMIT 1")
	require.NoError(t, err)
	assert.Equal(t, "2", nearest, "the nearest neighbour by L2 distance")
	super, err := sqlOnce(rw, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
	require.NoError(t, err)
	assert.Equal(t, "f", super, "the application's role is no superuser")
	seen, err := sqlOnce(rw, "SELECT count(*) FROM pg_stat_statements WHERE query LIKE '%ORDER BY embedding <->%' AND query NOT LIKE '%pg_stat_statements%'")
	require.NoError(t, err)
	assert.Equal(t, "1", seen, "pg_stat_statements shows the similarity query")
	primary := waitTopology(t, db, "", 2).Status.Replication.CurrentPrimary
	// pgaudit (pgaudit.log = ddl) logged the application's CREATE TABLE on
	// the primary, in its JSON log
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		logs, err := psql.Clientset.CoreV1().Pods(ns).GetLogs(primary, &corev1.PodLogOptions{Container: resources.EngineContainer}).DoRaw(ctx)
		if !assert.NoError(ct, err) {
			return
		}
		found := false
		for _, line := range strings.Split(string(logs), "\n") {
			found = found || (strings.Contains(line, "AUDIT: SESSION") && strings.Contains(line, "CREATE TABLE items"))
		}
		assert.True(ct, found, "pgaudit's record of CREATE TABLE items in the primary's log")
	}, time.Minute, 2*time.Second)
	// the primary's agent, scraped as the manager scrapes it (its options
	// from spec.monitoring and the credentials Secret), reports the query
	// among its top statements
	pod := getPod(t, db, primary)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		families, err := instance.PodAgents{Secrets: k8s}.Metrics(ctx, dbtest.Get(ct, k8s, db), pod)
		if !assert.NoError(ct, err) {
			return
		}
		found := 0
		for _, m := range families["dbkeeper_postgres_statement_calls_total"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "query" && strings.Contains(l.GetValue(), "ORDER BY embedding <-> $1") {
					found++
				}
			}
		}
		assert.Equal(ct, 1, found, "the similarity query among the primary's top statements")
	}, time.Minute, time.Second)
	w.Stop()
	missing, err := w.Missing(ctx, rw)
	require.NoError(t, err)
	assert.Empty(t, missing, "acknowledged ids lost")
}
