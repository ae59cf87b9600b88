// Package monitoring_test tests what the chart ships for monitoring: the
// alert rules (config/charts/dbkeeper/files/alerts.yaml) with promtool,
// check and unit tests (alerts_test.yaml beside this file), and the Grafana
// dashboard (config/charts/dbkeeper/dashboards/dbkeeper.json); and that
// both ask only for series the manager serves, so that a renamed metric
// cannot leave an alert that never fires.
package monitoring_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
	"github.com/dbkeeper/dbkeeper/test/framework/promtest"
)

const (
	rulesFile     = "config/charts/dbkeeper/files/alerts.yaml"
	rulesTests    = "test/monitoring/alerts_test.yaml"
	runbook       = "docs/operations/alerts.md"
	valuesFile    = "config/charts/dbkeeper/values.yaml"
	dashboardFile = "config/charts/dbkeeper/dashboards/dbkeeper.json"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := envtest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// runPromtool runs promtool with args in dir and fails the test with its
// output when it fails.
func runPromtool(t *testing.T, bin, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out.String())
}

// TestPromtoolCheckRules: Prometheus takes the rule file (syntax, PromQL,
// templates of the annotations, no rule twice).
func TestPromtoolCheckRules(t *testing.T) {
	if testing.Short() {
		t.Skip("runs promtool; skipped under -short")
	}
	root := repoRoot(t)
	runPromtool(t, promtest.Tool(t, "promtool"), root, "check", "rules", "--lint=all", "--lint-fatal", rulesFile)
}

// TestPromtoolTestRules runs the rules' unit tests: input series under
// which each alert fires, and others under which it does not.
func TestPromtoolTestRules(t *testing.T) {
	if testing.Short() {
		t.Skip("runs promtool; skipped under -short")
	}
	root := repoRoot(t)
	runPromtool(t, promtest.Tool(t, "promtool"), root, "test", "rules", rulesTests)
}

// ruleFile is a Prometheus rule file, as far as these tests read it.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	} `json:"groups"`
}

type rule struct {
	Alert       string            `json:"alert"`
	Record      string            `json:"record"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func alerts(t *testing.T, root string) []rule {
	t.Helper()
	var f ruleFile
	readYAML(t, filepath.Join(root, rulesFile), &f)
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatalf("%s holds no rule", rulesFile)
	}
	return out
}

// TestRulesNameExposedSeries: every series a rule selects is one the
// manager serves, with the labels the rule matches on.
func TestRulesNameExposedSeries(t *testing.T) {
	root := repoRoot(t)
	s := exposedSeries(t, root)
	for _, r := range alerts(t, root) {
		checkSelectors(t, s, r.Alert, r.Expr)
	}
}

// anchorOf is the anchor GitHub gives a markdown heading.
func anchorOf(heading string) string {
	a := strings.ToLower(strings.TrimSpace(heading))
	a = regexp.MustCompile("[^a-z0-9 _-]").ReplaceAllString(a, "")
	return strings.ReplaceAll(a, " ", "-")
}

// TestRulesAreUsable: each alert carries what an on-call engineer needs: a
// severity, a summary and a description that name the Database (the
// description the pod too, where the alert is about one), and a runbook_url whose section
// exists in docs/operations/alerts.md; each runbook section has its alert.
func TestRulesAreUsable(t *testing.T) {
	root := repoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, runbook))
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^### (Dbkeeper\w+)\s*$`).FindAllStringSubmatch(string(doc), -1) {
		sections[m[1]] = true
	}
	seen := map[string]bool{}
	for _, r := range alerts(t, root) {
		if r.Alert == "" {
			t.Errorf("recording rule %s: the file holds alerts only", r.Record)
			continue
		}
		if seen[r.Alert] {
			t.Errorf("%s: two alerts of that name", r.Alert)
		}
		seen[r.Alert] = true
		if !strings.HasPrefix(r.Alert, "Dbkeeper") {
			t.Errorf("%s: alerts are named Dbkeeper*", r.Alert)
		}
		if sev := r.Labels["severity"]; sev != "warning" && sev != "critical" {
			t.Errorf("%s: severity %q, want warning or critical", r.Alert, sev)
		}
		if r.For == "" {
			t.Errorf("%s: no for: one evaluation is not enough to page anyone", r.Alert)
		}
		// about one instance when its first aggregation keeps the pod
		perPod := false
		if m := regexp.MustCompile(`by \(([^)]*)\)`).FindStringSubmatch(r.Expr); m != nil {
			perPod = strings.Contains(m[1], "pod")
		}
		for _, key := range []string{"summary", "description"} {
			text := r.Annotations[key]
			if text == "" {
				t.Errorf("%s: no %s", r.Alert, key)
				continue
			}
			for _, label := range []string{"namespace", "database"} {
				if !strings.Contains(text, "$labels."+label) {
					t.Errorf("%s: its %s does not name the %s", r.Alert, key, label)
				}
			}
			if key == "description" && perPod && !strings.Contains(text, "$labels.pod") {
				t.Errorf("%s: its %s does not name the pod", r.Alert, key)
			}
		}
		want := "https://github.com/dbkeeper/dbkeeper/blob/main/" + runbook + "#" + anchorOf(r.Alert)
		if got := r.Annotations["runbook_url"]; got != want {
			t.Errorf("%s: runbook_url %q, want %q", r.Alert, got, want)
		}
		if !sections[r.Alert] {
			t.Errorf("%s: no section `### %s` in %s", r.Alert, r.Alert, runbook)
		}
	}
	for s := range sections {
		if !seen[s] {
			t.Errorf("%s has a section for %s, which is no alert of %s", runbook, s, rulesFile)
		}
	}
}

// ruleTests is promtool's unit test file, as far as this test reads it.
type ruleTests struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestEveryAlertIsUnitTested: alerts_test.yaml tests the very rule file
// the chart ships, and each of its alerts both firing and not firing.
func TestEveryAlertIsUnitTested(t *testing.T) {
	root := repoRoot(t)
	var tests ruleTests
	data, err := os.ReadFile(filepath.Join(root, rulesTests))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &tests); err != nil {
		t.Fatal(err)
	}
	want, err := filepath.Rel(filepath.Dir(filepath.Join(root, rulesTests)), filepath.Join(root, rulesFile))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tests.RuleFiles, []string{want}) {
		t.Errorf("%s tests %v, want [%s]", rulesTests, tests.RuleFiles, want)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, r := range alerts(t, root) {
		if !fires[r.Alert] {
			t.Errorf("%s: no test in %s where it fires", r.Alert, rulesTests)
		}
		if !quiet[r.Alert] {
			t.Errorf("%s: no test in %s where it does not fire", r.Alert, rulesTests)
		}
	}
}

// thresholdMark is a number the chart replaces with a value:
// `1.5e9 # threshold: xidAgeWarning`.
var thresholdMark = regexp.MustCompile(`([0-9][0-9.eE+]*)\s*#\s*threshold:\s*(\w+)\b`)

// TestThresholdsMatchValues: the numbers marked `# threshold: <key>` in the
// rule file are exactly monitoring.prometheusRule.thresholds of the
// chart's values, with the same defaults, so the chart renders the file
// unchanged by default and every threshold it documents exists.
func TestThresholdsMatchValues(t *testing.T) {
	root := repoRoot(t)
	inFile := map[string]float64{}
	for _, r := range alerts(t, root) {
		for _, m := range thresholdMark.FindAllStringSubmatch(r.Expr, -1) {
			v, err := strconv.ParseFloat(m[1], 64)
			if err != nil {
				t.Errorf("%s: threshold %s: %v", r.Alert, m[2], err)
				continue
			}
			if old, ok := inFile[m[2]]; ok && old != v {
				t.Errorf("threshold %s is %v in one rule and %v in another", m[2], old, v)
			}
			inFile[m[2]] = v
		}
	}
	var values struct {
		Monitoring struct {
			PrometheusRule struct {
				Thresholds map[string]float64 `json:"thresholds"`
			} `json:"prometheusRule"`
		} `json:"monitoring"`
	}
	data, err := os.ReadFile(filepath.Join(root, valuesFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	inValues := values.Monitoring.PrometheusRule.Thresholds
	if len(inFile) == 0 || len(inValues) == 0 {
		t.Fatalf("thresholds: %d in %s, %d in %s", len(inFile), rulesFile, len(inValues), valuesFile)
	}
	for k, v := range inFile {
		if got, ok := inValues[k]; !ok {
			t.Errorf("%s marks threshold %s, which %s does not have", rulesFile, k, valuesFile)
		} else if got != v {
			t.Errorf("threshold %s: %v in %s, %v in %s", k, v, rulesFile, got, valuesFile)
		}
	}
	for k := range inValues {
		if _, ok := inFile[k]; !ok {
			t.Errorf("%s has threshold %s, which no rule of %s marks", valuesFile, k, rulesFile)
		}
	}
}
