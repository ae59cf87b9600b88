// Package promtest runs a real Prometheus server (Debian's, unpacked by
// test/tools/install.sh) on loopback for a test: it scrapes the targets it is
// given, evaluates dbkeeper's alert rules (config/charts/dbkeeper/files/alerts.yaml,
// with their thresholds and durations set by the test) and answers which
// alerts fire, through its HTTP API. Nothing it starts listens beyond
// 127.0.0.1; the server is stopped by its pid when the test ends, and dies
// with the test process.
package promtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/dbkeeper/dbkeeper/test/framework"
	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
)

// RulesFile is the chart's alert rules, relative to the repository's root.
const RulesFile = "config/charts/dbkeeper/files/alerts.yaml"

// Target is one scrape target.
type Target struct {
	// URL is the whole address of the metrics, http://127.0.0.1:port/path.
	URL string
	// Labels are added to every series of the target (as the manager adds
	// namespace, database and pod to an instance's series).
	Labels map[string]string
	// Token, when set, is sent as a bearer token.
	Token string
}

// Options of one server.
type Options struct {
	Targets []Target
	// Rules is the content of the rule file it evaluates (Rules()).
	Rules string
	// Interval is the scrape interval and timeout (default 5 s: an
	// agent's scrape waits up to 4 s for its server); the rules are
	// evaluated every second.
	Interval time.Duration
}

// Server is one running Prometheus.
type Server struct {
	// URL is its HTTP address.
	URL string
	log *framework.SyncBuffer
}

// RequireToolsEnv, set to 1, makes a missing tool a failure rather than a
// skip; so does running as root (as CI does, which installs the tools).
const RequireToolsEnv = "DBKEEPER_REQUIRE_TOOLS"

// Tool is the path of a tool that test/tools/install.sh unpacks from
// Debian's prometheus package (`make tools`): promtool or prometheus.
// Without it the test is skipped, or fails where the tools are required
// (RequireToolsEnv, or root).
func Tool(t testing.TB, name string) string {
	t.Helper()
	root, err := envtest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "test", "tools", "install.sh")
	out, err := exec.Command(script, "--print").Output()
	if err != nil {
		t.Fatalf("%s --print: %v", script, err)
	}
	path := filepath.Join(strings.TrimSpace(string(out)), name)
	if _, err := os.Stat(path); err != nil {
		msg := "no " + name + " (" + err.Error() + "): run `make tools` on a machine with apt"
		if os.Getenv(RequireToolsEnv) == "1" || os.Geteuid() == 0 {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}

// Require is Tool for the Prometheus server, for a test to call before its
// set-up.
func Require(t testing.TB) {
	t.Helper()
	Tool(t, "prometheus")
}

// Rules is the chart's rule file as the chart renders it with thresholds
// (monitoring.prometheusRule.thresholds: the number before each
// `# threshold: <key>` comment is replaced), and with time compressed for a
// test: every `for:` becomes forDuration and every range of a range vector
// (`[5m]`) becomes window.
func Rules(thresholds map[string]string, forDuration, window time.Duration) (string, error) {
	root, err := envtest.RepoRoot()
	if err != nil {
		return "", err
	}
	raw, err := os.ReadFile(filepath.Join(root, RulesFile))
	if err != nil {
		return "", fmt.Errorf("reading the rules: %w", err)
	}
	rules := string(raw)
	for key, value := range thresholds {
		re := regexp.MustCompile(`([0-9][0-9.eE+]*)(\s*#\s*threshold:\s*` + regexp.QuoteMeta(key) + `\b)`)
		if !re.MatchString(rules) {
			return "", fmt.Errorf("no rule has the threshold %s", key)
		}
		rules = re.ReplaceAllString(rules, value+"$2")
	}
	rules = regexp.MustCompile(`(?m)^(\s+for:\s*)\S+$`).ReplaceAllString(rules, "${1}"+promDuration(forDuration))
	rules = regexp.MustCompile(`\[[0-9]+[smhd]\]`).ReplaceAllString(rules, "["+promDuration(window)+"]")
	return rules, nil
}

// promDuration is d in Prometheus' duration syntax (whole milliseconds).
func promDuration(d time.Duration) string {
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

// Start runs a server with o until the test ends (Require says what a
// missing binary does).
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	bin := Tool(t, "prometheus")
	if o.Interval == 0 {
		o.Interval = 5 * time.Second
	}
	dir := t.TempDir()
	cfg := map[string]any{
		"global": map[string]any{
			"scrape_interval":     promDuration(o.Interval),
			"scrape_timeout":      promDuration(o.Interval),
			"evaluation_interval": "1s",
		},
		"rule_files": []string{filepath.Join(dir, "rules.yaml")},
	}
	var jobs []map[string]any
	for i, tg := range o.Targets {
		scheme, rest, ok := strings.Cut(tg.URL, "://")
		if !ok {
			t.Fatalf("target %q: no scheme", tg.URL)
		}
		host, path, _ := strings.Cut(rest, "/")
		job := map[string]any{
			"job_name":       fmt.Sprintf("target-%d", i),
			"scheme":         scheme,
			"metrics_path":   "/" + path,
			"honor_labels":   true,
			"static_configs": []map[string]any{{"targets": []string{host}, "labels": tg.Labels}},
		}
		if tg.Token != "" {
			job["authorization"] = map[string]any{"type": "Bearer", "credentials": tg.Token}
		}
		jobs = append(jobs, job)
	}
	cfg["scrape_configs"] = jobs
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"prometheus.yaml": string(b), "rules.yaml": o.Rules} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	port, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{URL: "http://127.0.0.1:" + strconv.Itoa(port), log: &framework.SyncBuffer{}}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yaml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address=127.0.0.1:"+strconv.Itoa(port),
		"--log.level=warn")
	cmd.Stdout, cmd.Stderr = s.log, s.log
	cmd.SysProcAttr = framework.SysProcAttr()
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting prometheus: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("prometheus' log:\n%s", s.log.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		select {
		case <-exited:
			t.Fatalf("prometheus exited: %s", s.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready within 30s (%v): %s", err, s.log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Sample is one sample of an instant query's vector.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Query evaluates expr now and returns its vector.
func (s *Server) Query(ctx context.Context, expr string) ([]Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/api/v1/query?query="+url.QueryEscape(expr), nil)
	if err != nil {
		return nil, err
	}
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	if err := s.get(req, &data); err != nil {
		return nil, fmt.Errorf("query %q: %w", expr, err)
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("query %q: a %s, not a vector", expr, data.ResultType)
	}
	out := make([]Sample, 0, len(data.Result))
	for _, r := range data.Result {
		text, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return nil, fmt.Errorf("query %q: value %v: %w", expr, r.Value[1], err)
		}
		out = append(out, Sample{Labels: r.Metric, Value: v})
	}
	return out, nil
}

// get sends req to the API and decodes its data into data.
func (s *Server) get(req *http.Request, data any) error {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("asking prometheus: %w", err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("prometheus' answer (HTTP %d): %w", resp.StatusCode, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("prometheus answered HTTP %d, %s: %s", resp.StatusCode, body.Status, body.Error)
	}
	return json.Unmarshal(body.Data, data)
}

// WaitQuery polls expr until ok holds for its vector, failing the test after
// timeout.
func (s *Server) WaitQuery(t testing.TB, timeout time.Duration, expr string, ok func([]Sample) bool) []Sample {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		v, err := s.Query(ctx, expr)
		cancel()
		if err == nil && ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s (last %v, error %v)", timeout, expr, v, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Alert is one alert the server holds, pending or firing.
type Alert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
	Value  string            `json:"value"`
}

// String is the alert's name, its labels other than severity, and its state.
func (a Alert) String() string {
	var labels []string
	for k, v := range a.Labels {
		if k != "alertname" && k != "severity" {
			labels = append(labels, k+"="+v)
		}
	}
	sort.Strings(labels)
	return fmt.Sprintf("%s{%s} %s %s", a.Labels["alertname"], strings.Join(labels, ","), a.State, a.Value)
}

// Alerts are the server's alerts now.
func (s *Server) Alerts(ctx context.Context) ([]Alert, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/api/v1/alerts", nil)
	if err != nil {
		return nil, err
	}
	var data struct {
		Alerts []Alert `json:"alerts"`
	}
	if err := s.get(req, &data); err != nil {
		return nil, fmt.Errorf("the alerts: %w", err)
	}
	return data.Alerts, nil
}

// WaitAlerts polls the server's alerts until ok holds, failing the test with
// the alerts it last saw (and what ok was waiting for) after timeout.
func (s *Server) WaitAlerts(t testing.TB, timeout time.Duration, what string, ok func([]Alert) bool) []Alert {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last []Alert
	var err error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		last, err = s.Alerts(ctx)
		cancel()
		if err == nil && ok(last) {
			return last
		}
		if time.Now().After(deadline) {
			var lines []string
			for _, a := range last {
				lines = append(lines, "  "+a.String())
			}
			t.Fatalf("not within %s: %s (last error %v); alerts:\n%s", timeout, what, err, strings.Join(lines, "\n"))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// WaitFiring waits until the alerts that fire, among those keep accepts,
// are exactly want (alert name -> the pod label of each, "" for an alert
// about a whole Database), and logs how long that took as MEASURED.
func (s *Server) WaitFiring(t testing.TB, what string, timeout time.Duration, keep func(Alert) bool, want map[string][]string) {
	t.Helper()
	var wanted []string
	for name, pods := range want {
		for _, pod := range pods {
			wanted = append(wanted, name+"/"+pod)
		}
	}
	sort.Strings(wanted)
	start := time.Now()
	s.WaitAlerts(t, timeout, what, func(alerts []Alert) bool {
		seen := map[string]bool{}
		var got []string
		for _, a := range alerts {
			key := a.Labels["alertname"] + "/" + a.Labels["pod"]
			if a.State == "firing" && keep(a) && !seen[key] {
				seen[key] = true
				got = append(got, key)
			}
		}
		sort.Strings(got)
		return slices.Equal(got, wanted)
	})
	t.Logf("MEASURED %s: %s", what, time.Since(start).Round(100*time.Millisecond))
}
