package realnode

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
)

// TestOperatorUpgradeKeepsPostgresRunning: `helm upgrade` to another build
// of dbkeeper (the same source built as version "next": images/build.sh
// manager-next) while a writer runs through each Database: every agent
// replaces itself in place and reports the new build, and nothing of
// PostgreSQL notices: no postmaster restarted (its start time unchanged
// on every instance), no container restarted, no pod replaced, a session
// opened before the upgrade answers after it in the same backend, no
// write failed and none is lost. Replicas 1 and 3.
func TestOperatorUpgradeKeepsPostgresRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	system, apps := newNamespace(t), newNamespace(t)
	helmInstall(t, system, apps)

	type watched struct {
		db      *dbv1.Database
		rw      sqlconn.Target
		writer  *dbtest.Writer
		held    *sqlconn.Conn
		backend string
		started map[string]string // pod → pg_postmaster_start_time()
		pods    map[string]string // pod → UID and restart count
	}
	var all []*watched
	for _, db := range []*dbv1.Database{replicated(apps, "single", 1), replicated(apps, "trio", 3)} {
		// archiving into the backup volume's repository: the running
		// server's archive_command names the agent's runtime directory,
		// which the new agent must keep
		db.Spec.Backup.VolumeRepository = ""
		db.Spec.Backup.ArchiveTimeout = &metav1.Duration{Duration: 10 * time.Second}
		create(t, db)
		all = append(all, &watched{db: db})
	}
	for _, w := range all {
		waitReady(t, w.db)
		waitTopology(t, w.db, "", int(*w.db.Spec.Replicas))
		waitCondition(t, w.db, dbv1.ConditionBackupReady, metav1.ConditionTrue, dbv1.ReasonArchiving)
		w.rw = serviceTarget(t, w.db, resources.ClientServiceName(w.db))
		var err error
		w.writer, err = dbtest.StartWriter(ctx, w.rw, "acks")
		require.NoError(t, err)
		defer w.writer.Stop()
		// Ready may come before kube-proxy has the Service's endpoint
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			w.held, err = sqlconn.Connect(ctx, w.rw)
			assert.NoError(ct, err)
		}, timeout, time.Second, "a session through %s", w.db.Name)
		defer w.held.Close(ctx)
		w.backend = backendOf(t, w.held)
		w.started, w.pods = postmasters(t, w.db), podStates(t, w.db)
	}
	before := agentVersions(t, all[0].db)
	t.Logf("agents before the upgrade: %v", before)

	next, err := theNode.BuildImage("manager-next")
	require.NoError(t, err)
	start := time.Now()
	helmUpgrade(t, system, next)
	t.Logf("helm upgrade to %s done in %s", next, time.Since(start).Round(time.Second))

	for _, w := range all {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			for pod, v := range agentVersions(ct, w.db) {
				assert.Equal(ct, "next", v, "the agent of %s runs the new build", pod)
			}
		}, 2*timeout, time.Second, "every agent of %s took over in place", w.db.Name)
	}
	t.Logf("MEASURED operator upgrade: every agent on the new build %s after the helm upgrade started", time.Since(start).Round(time.Second))
	// each agent took the build once, the standbys before their primary;
	// the controllers' Events regard the Database and relate the pod
	var upgraded []string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		events := &corev1.EventList{}
		require.NoError(ct, k8s.List(ctx, events, client.InNamespace(apps)))
		slices.SortFunc(events.Items, func(a, b corev1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
		upgraded = nil
		for _, e := range events.Items {
			if e.Reason == "AgentUpgraded" && e.Related != nil {
				upgraded = append(upgraded, e.Related.Name)
			}
		}
		assert.ElementsMatch(ct, []string{"single-0", "trio-0", "trio-1", "trio-2"}, upgraded, "one takeover per instance")
	}, time.Minute, time.Second)
	t.Logf("agents upgraded in place, in order: %v", upgraded)
	assert.Greater(t, slices.Index(upgraded, "trio-0"), slices.Index(upgraded, "trio-1"), "the primary after its standbys")
	assert.Greater(t, slices.Index(upgraded, "trio-0"), slices.Index(upgraded, "trio-2"), "the primary after its standbys")
	time.Sleep(3 * time.Second) // writes after the last takeover too
	settled := time.Now()

	// the adopted servers still archive: WAL written after the last
	// takeover reaches the repository, and no archiving failed since
	for _, w := range all {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			a := dbtest.Get(ct, k8s, w.db).Status.Backup.Archive
			if assert.NotNil(ct, a, "%s: status.backup.archive", w.db.Name) && assert.NotNil(ct, a.LastArchivedTime) {
				assert.True(ct, a.LastArchivedTime.After(settled), "%s: WAL archived after the upgrade (last %s)", w.db.Name, a.LastArchivedTime)
			}
		}, 2*time.Minute, 2*time.Second)
		a := dbtest.Get(t, k8s, w.db).Status.Backup.Archive
		if a.LastFailedTime != nil {
			assert.True(t, a.LastFailedTime.Before(&metav1.Time{Time: start}), "%s: archiving failed at %s, after the upgrade began", w.db.Name, a.LastFailedTime)
		}
	}

	for _, w := range all {
		w.writer.Stop()
		assert.Zero(t, w.writer.Failed(), "%s: writes failed across the upgrade: %s", w.db.Name, w.writer.Describe())
		missing, err := w.writer.Missing(ctx, w.rw)
		require.NoError(t, err)
		assert.Empty(t, missing, "%s: acknowledged ids lost", w.db.Name)
		backend := backendOf(t, w.held)
		assert.Equal(t, w.backend, backend, "%s: the same backend serves the held session", w.db.Name)
		assert.Equal(t, w.started, postmasters(t, w.db), "%s: a postmaster restarted", w.db.Name)
		assert.Equal(t, w.pods, podStates(t, w.db), "%s: a pod was replaced or a container restarted", w.db.Name)
		t.Logf("%s: %s, the held session on backend %s, postmasters %v", w.db.Name, w.writer.Describe(), backend, w.started)
	}
}

// backendOf is the process id of the session's backend.
func backendOf(t *testing.T, c *sqlconn.Conn) string {
	t.Helper()
	v, ok, err := c.QueryValue(context.Background(), "SELECT pg_backend_pid()::text")
	require.NoError(t, err, "the held session")
	require.True(t, ok)
	return *v
}

// postmasters is when each instance's postmaster started.
func postmasters(t *testing.T, db *dbv1.Database) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range podsOf(t, db) {
		v, err := sqlWithin(podTarget(t, db, p.Name), "SELECT pg_postmaster_start_time()::text", queryTimeout)
		require.NoError(t, err, p.Name)
		out[p.Name] = v
	}
	return out
}

// podStates is each pod's UID and its containers' restart counts.
func podStates(t *testing.T, db *dbv1.Database) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range podsOf(t, db) {
		s := string(p.UID)
		for _, c := range p.Status.ContainerStatuses {
			s += " " + c.Name + "=" + strconv.Itoa(int(c.RestartCount))
		}
		out[p.Name] = s
	}
	return out
}

// agentVersions is the build each instance's agent reports.
func agentVersions(t require.TestingT, db *dbv1.Database) map[string]string {
	ctx := context.Background()
	live := &dbv1.Database{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(db), live))
	out := map[string]string{}
	var pods corev1.PodList
	require.NoError(t, k8s.List(ctx, &pods, client.InNamespace(db.Namespace), client.MatchingLabels(resources.PodSelectorLabels(db))))
	for i := range pods.Items {
		p := &pods.Items[i]
		s, err := instance.PodAgents{Secrets: k8s}.Status(ctx, live, p)
		switch {
		case err != nil:
			out[p.Name] = "error: " + err.Error()
		case s.Agent == nil:
			out[p.Name] = "(no build reported)"
		default:
			out[p.Name] = s.Agent.Version
		}
	}
	return out
}
