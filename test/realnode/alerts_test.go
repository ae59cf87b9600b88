package realnode

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/cluster"
	"github.com/dbkeeper/dbkeeper/test/framework/faults"
	"github.com/dbkeeper/dbkeeper/test/framework/promtest"
)

// TestAlertsOnTheManagersSeries runs a real Prometheus that scrapes the
// manager's /metrics as the chart's ServiceMonitor does (honor_labels), the
// manager scraping a replicated Database's agents on the real node, and
// evaluates the chart's alert rules at their default thresholds, durations
// compressed: the user-defined query of spec.monitoring.customQueries'
// ConfigMap is reported from each instance, run as the application's role;
// nothing fires on the healthy Database; the primary's data
// volume filled (a volume of its own) fires the volume's alerts for that
// pod, and they clear once it is freed; the standby's pod frozen (agent and
// server) fires the failing scrape's alert, which clears once thawed. The
// alerts on PostgreSQL's own faults are internal/agent's
// TestAlertsFireOnRealFaults.
func TestAlertsOnTheManagersSeries(t *testing.T) {
	t.Parallel()
	promtest.Require(t)
	ctx := context.Background()
	ns := newNamespace(t)
	metrics := startOperatorWithMetrics(t, ns)
	create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "queries"}, Data: map[string]string{"queries.yaml": `
whoami:
  query: SELECT current_user AS role_name, pg_is_in_recovery() AS standby
  metrics:
    - role_name: {usage: LABEL, description: The role the query ran as.}
    - standby: {usage: GAUGE, description: 1 on a standby.}
`}})
	db := newDatabase(ns, "watched", "17", func(d *dbv1.Database) {
		d.Spec.Replicas = ptr.To[int32](2)
		d.Spec.Storage.StorageClassName = ptr.To(cluster.SizedStorageClassName)
		d.Spec.Storage.Size = ptr.To(resourceQuantity("256Mi"))
		d.Spec.Monitoring.CustomQueries = &dbv1.CustomQueriesSpec{ConfigMapName: "queries"}
	})
	create(t, db)
	waitReady(t, db)
	primary, standbyPod := resources.InstanceName(db, 0), resources.InstanceName(db, 1)
	waitTopology(t, db, primary, 2)

	rules, err := promtest.Rules(nil, 3*time.Second, 20*time.Second)
	require.NoError(t, err)
	prom := promtest.Start(t, promtest.Options{Interval: 2 * time.Second, Rules: rules, Targets: []promtest.Target{
		{URL: metrics},
	}})
	// the alerts of this namespace: the test process' other managers serve
	// the backups' series of their Databases on the same registry
	firing := func(what string, timeout time.Duration, want map[string][]string) {
		t.Helper()
		prom.WaitFiring(t, what, timeout, func(a promtest.Alert) bool { return a.Labels["namespace"] == ns }, want)
	}

	// Healthy: both instances scraped through the manager, with the roles
	// they have; nothing fires.
	prom.WaitQuery(t, time.Minute, `dbkeeper_postgres_role{namespace="`+ns+`"} == 1`, func(s []promtest.Sample) bool {
		roles := map[string]string{}
		for _, v := range s {
			roles[v.Labels["pod"]] = v.Labels["role"]
		}
		return roles[primary] == "primary" && roles[standbyPod] == "replica" && len(roles) == 2
	})
	// The user-defined query of the ConfigMap, run on each instance as the
	// application's role.
	app := secretValue(t, ns, resources.CredentialsSecretName(db), "username")
	prom.WaitQuery(t, time.Minute, `dbkeeper_postgres_custom_whoami_standby{namespace="`+ns+`"}`, func(s []promtest.Sample) bool {
		standby := map[string]float64{}
		for _, v := range s {
			if v.Labels["role_name"] == app {
				standby[v.Labels["pod"]] = v.Value
			}
		}
		return len(standby) == 2 && standby[primary] == 0 && standby[standbyPod] == 1
	})
	time.Sleep(6 * time.Second)
	firing("nothing fires on the healthy Database", time.Second, nil)

	// The primary's data volume full: its volume's three alerts.
	inj := faults.New(k8s)
	_, err = sqlWithin(podTarget(t, db, primary), "CHECKPOINT", time.Minute)
	require.NoError(t, err)
	unfill, err := inj.FillVolume(ctx, ns, primary)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unfill() })
	firing("a full volume fires its alerts", time.Minute, map[string][]string{
		"DbkeeperVolumeSpaceLow":      {primary},
		"DbkeeperVolumeSpaceCritical": {primary},
		"DbkeeperVolumeFullIn24h":     {primary},
	})
	require.NoError(t, unfill())
	firing("the volume's alerts clear once it is freed", time.Minute, nil)

	// The standby frozen, its agent with it (within the liveness probe's
	// minute): the manager's scrapes of it fail.
	thaw, err := inj.Freeze(ctx, ns, standbyPod)
	require.NoError(t, err)
	t.Cleanup(func() { _ = thaw() })
	firing("a frozen instance fires the failing scrape's alert", time.Minute, map[string][]string{
		"DbkeeperInstanceScrapeFailing": {standbyPod},
	})
	require.NoError(t, thaw())
	firing("the failing scrape's alert clears once thawed", time.Minute, nil)
}
