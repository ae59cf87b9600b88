package monitoring_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// dashboard is a Grafana dashboard, as far as this test reads it.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	GridPos    map[string]int `json:"gridPos"`
	Targets    []panelTarget  `json:"targets"`
	Panels     []panel        `json:"panels"`
}

type panelTarget struct {
	Expr       string         `json:"expr"`
	RefID      string         `json:"refId"`
	Datasource *datasourceRef `json:"datasource"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Datasource *datasourceRef  `json:"datasource"`
}

// grafanaGlobals are the variables Grafana defines itself.
var grafanaGlobals = []string{"__interval", "__interval_ms", "__rate_interval", "__range", "__range_s", "__range_ms",
	"__dashboard", "__from", "__to", "__org", "__user", "timeFilter", "__name"}

// variableUse finds $name, ${name}, ${name:format} and [[name]].
var variableUse = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// expandVariables replaces the variables of a query with what Grafana
// would put there: a duration for the intervals, a regular expression for
// the others (all of them are used in =~ matchers).
func expandVariables(expr string) string {
	return variableUse.ReplaceAllStringFunc(expr, func(m string) string {
		name := variableUse.FindStringSubmatch(m)
		n := name[1] + name[2] + name[3]
		if strings.HasPrefix(n, "__") {
			return "5m"
		}
		return ".*"
	})
}

func readDashboard(t *testing.T, root string) (dashboard, []byte) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s is not JSON: %v", dashboardFile, err)
	}
	return d, data
}

// allPanels flattens the panels of rows, collapsed ones included.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// labelValues is a variable's query: label_values(selector, label).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

// TestDashboard: the dashboard parses, asks only for series the manager
// serves (as the rules do), through the data source variable, and uses
// only variables it defines.
func TestDashboard(t *testing.T) {
	root := repoRoot(t)
	s := exposedSeries(t, root)
	d, raw := readDashboard(t, root)
	if d.UID == "" || d.Title == "" {
		t.Errorf("the dashboard needs a uid and a title (uid %q, title %q)", d.UID, d.Title)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d: the data source variable by uid needs 36 or later", d.SchemaVersion)
	}

	defined := map[string]bool{}
	for _, v := range d.Templating.List {
		if defined[v.Name] {
			t.Errorf("variable %s defined twice", v.Name)
		}
		defined[v.Name] = true
		if v.Type != "query" {
			continue
		}
		var q string
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				t.Errorf("variable %s: query %s: %v", v.Name, v.Query, err)
				continue
			}
			q = obj.Query
		}
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, q)
			continue
		}
		where := "variable " + v.Name
		for _, name := range checkSelectors(t, s, where, expandVariables(m[1])) {
			if !slices.Contains(s[name], m[2]) {
				t.Errorf("%s: %s has no label %s", where, name, m[2])
			}
		}
		if v.Datasource == nil || v.Datasource.UID != "${datasource}" {
			t.Errorf("%s: its data source is not ${datasource}", where)
		}
	}
	for _, want := range []string{"datasource", "namespace", "database", "pod"} {
		if !defined[want] {
			t.Errorf("no variable %s", want)
		}
	}

	ids := map[int]bool{}
	for _, p := range allPanels(d.Panels) {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if ids[p.ID] {
			t.Errorf("%s: id %d used twice", where, p.ID)
		}
		ids[p.ID] = true
		if len(p.GridPos) == 0 {
			t.Errorf("%s: no gridPos", where)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("%s: its data source is not ${datasource}", where)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s: no query", where)
		}
		for _, tg := range p.Targets {
			if tg.Datasource != nil && tg.Datasource.UID != "${datasource}" {
				t.Errorf("%s, query %s: its data source is not ${datasource}", where, tg.RefID)
			}
			checkSelectors(t, s, where+" query "+tg.RefID, expandVariables(tg.Expr))
		}
	}

	// every variable anywhere in the dashboard (queries, titles, links)
	for _, m := range variableUse.FindAllStringSubmatch(string(raw), -1) {
		name := m[1] + m[2] + m[3]
		if !defined[name] && !slices.Contains(grafanaGlobals, name) {
			t.Errorf("the dashboard uses $%s, which it does not define", name)
		}
	}
}
