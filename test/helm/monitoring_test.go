package helm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// alertRules returns the rendered PrometheusRule's rules by alert name.
func alertRules(t *testing.T, objs map[string]*unstructured.Unstructured) map[string]map[string]any {
	t.Helper()
	pr := objs["PrometheusRule ops/rel-dbkeeper"]
	require.NotNil(t, pr, "no PrometheusRule in %v", keys(objs))
	groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
	require.NotEmpty(t, groups)
	out := map[string]map[string]any{}
	for _, g := range groups {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			rule := r.(map[string]any)
			out[rule["alert"].(string)] = rule
		}
	}
	return out
}

// TestTemplateMonitoring: the PrometheusRule and the dashboard's ConfigMap
// are off by default; on, the PrometheusRule holds files/alerts.yaml as it
// is (what promtool tests) unless values change a threshold, leave an
// alert out or add labels, and the ConfigMap holds the dashboard as it is.
func TestTemplateMonitoring(t *testing.T) {
	if testing.Short() {
		t.Skip("runs helm; skipped under -short")
	}
	root, chart, _ := paths(t)
	objs := render(t)
	assert.Nil(t, objs["PrometheusRule ops/rel-dbkeeper"])
	assert.Nil(t, objs["ConfigMap ops/rel-dbkeeper-dashboard"])

	objs = render(t, "-f", filepath.Join(root, "test", "helm", "testdata", "monitoring.values.yaml"))
	pr := objs["PrometheusRule ops/rel-dbkeeper"]
	require.NotNil(t, pr, "no PrometheusRule in %v", keys(objs))
	assert.Equal(t, "kube-prometheus-stack", pr.GetLabels()["release"])
	assert.Equal(t, "dbkeeper", pr.GetLabels()["app.kubernetes.io/name"])
	data, err := os.ReadFile(filepath.Join(chart, "files", "alerts.yaml"))
	require.NoError(t, err)
	file := map[string]any{}
	require.NoError(t, yaml.Unmarshal(data, &file))
	groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
	assert.Equal(t, file["groups"], groups, "the PrometheusRule differs from files/alerts.yaml with the default thresholds")

	cm := objs["ConfigMap ops/rel-dbkeeper-dashboard"]
	require.NotNil(t, cm, "no dashboard ConfigMap in %v", keys(objs))
	assert.Equal(t, "1", cm.GetLabels()["grafana_dashboard"])
	assert.Equal(t, "Databases", cm.GetAnnotations()["grafana_folder"])
	dashboard, err := os.ReadFile(filepath.Join(chart, "dashboards", "dbkeeper.json"))
	require.NoError(t, err)
	got, _, _ := unstructured.NestedString(cm.Object, "data", "dbkeeper.json")
	assert.Equal(t, strings.TrimSuffix(string(dashboard), "\n"), got)

	t.Run("tuned", func(t *testing.T) {
		rules := alertRules(t, render(t, "--set", "monitoring.prometheusRule.enabled=true",
			"--set", "monitoring.prometheusRule.thresholds.xidAgeWarning=1000000000",
			// --set takes integers only as numbers
			"--set-json", "monitoring.prometheusRule.thresholds.connectionsUsedRatio=0.8",
			"--set-json", "monitoring.prometheusRule.thresholds.replicationLagBytes=5e9",
			"--set", "monitoring.prometheusRule.disabledAlerts={DbkeeperLongRunningTransaction}",
			"--set", "monitoring.prometheusRule.alertLabels.team=databases",
			"--set", "monitoring.prometheusRule.alertLabels.severity=info"))
		assert.Contains(t, rules["DbkeeperTransactionIDAgeHigh"]["expr"], "> 1000000000 # threshold: xidAgeWarning")
		assert.Contains(t, rules["DbkeeperTransactionIDWraparoundImminent"]["expr"], "> 1900000000 # threshold: xidAgeCritical")
		assert.Contains(t, rules["DbkeeperConnectionsNearMax"]["expr"], "> 0.8 # threshold: connectionsUsedRatio")
		assert.Contains(t, rules["DbkeeperReplicationLagHigh"]["expr"], "> 5000000000 # threshold: replicationLagBytes")
		assert.NotContains(t, rules, "DbkeeperLongRunningTransaction")
		assert.Contains(t, rules, "DbkeeperInstanceDown")
		for name, r := range rules {
			labels := r["labels"].(map[string]any)
			assert.Equal(t, "databases", labels["team"], name)
			assert.Contains(t, []any{"warning", "critical"}, labels["severity"], "%s: an alert's own severity wins", name)
		}
	})

	t.Run("refused", func(t *testing.T) {
		out, err := helm(t, "template", "rel", chart, "--set", "monitoring.prometheusRule.enabled=true",
			"--set", "monitoring.prometheusRule.disabledAlerts={DbkeeperNoSuchAlert}")
		require.Error(t, err, "an unknown alert in disabledAlerts was accepted")
		assert.Contains(t, out, "no alert DbkeeperNoSuchAlert")
		for _, set := range []string{"monitoring.prometheusRule.thresholds.xidAge=1", "monitoring.prometheusRule.thresholds.connectionsUsedRatio=2",
			"monitoring.grafanaDashboard.enabled=yes", "monitoring.prometheusRule.namespace=other"} {
			out, err := helm(t, "template", "rel", chart, "--set", set)
			assert.Error(t, err, "--set %s accepted", set)
			assert.Contains(t, out, "values don't meet the specifications of the schema", "--set %s", set)
		}
	})
}

// TestServiceMonitorHonorsLabels: the manager serves series labelled with
// the database pods' namespace and pod; the scrape keeps those labels.
func TestServiceMonitorHonorsLabels(t *testing.T) {
	if testing.Short() {
		t.Skip("runs helm; skipped under -short")
	}
	objs := render(t, "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.certSecret=dbkeeper-metrics-tls")
	endpoints, _, _ := unstructured.NestedSlice(objs["ServiceMonitor ops/rel-dbkeeper"].Object, "spec", "endpoints")
	require.Len(t, endpoints, 1)
	assert.Equal(t, true, endpoints[0].(map[string]any)["honorLabels"])
}
