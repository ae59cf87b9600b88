package instancemetrics

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// exposition is what every agent of the tests serves: a few of the
// collector's series, one with a label of the manager's own (database),
// and a family of another name.
const exposition = `# HELP dbkeeper_postgres_up 1 when the local PostgreSQL server answered this scrape, else 0.
# TYPE dbkeeper_postgres_up gauge
dbkeeper_postgres_up 1
# HELP dbkeeper_postgres_role 1, labelled with the role the server runs as.
# TYPE dbkeeper_postgres_role gauge
dbkeeper_postgres_role{role="primary"} 1
# HELP dbkeeper_postgres_xact_commits_total Transactions committed in the database.
# TYPE dbkeeper_postgres_xact_commits_total counter
dbkeeper_postgres_xact_commits_total{datname="app"} 42
# HELP dbkeeper_postgres_legacy_size A series of an agent that labelled its databases database.
# TYPE dbkeeper_postgres_legacy_size gauge
dbkeeper_postgres_legacy_size{database="app"} 7
# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 12
`

// agents is an httptest TLS server standing for the agents of pods:
// GET /<pod>/metrics with the token serves exposition, or 500 for a pod
// that fails.
type agents struct {
	t   *testing.T
	srv *httptest.Server

	mu      sync.Mutex
	failing map[string]bool
}

func newAgents(t *testing.T) *agents {
	a := &agents{t: t, failing: map[string]bool{}}
	a.srv = httptest.NewTLSServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *agents) serve(w http.ResponseWriter, r *http.Request) {
	pod, ok := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, "/"), agentapi.MetricsPath)
	if !ok || r.Header.Get("Authorization") != "Bearer tok" {
		http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
		return
	}
	a.mu.Lock()
	failing := a.failing[pod]
	a.mu.Unlock()
	if failing {
		http.Error(w, "failing", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write([]byte(exposition))
}

func (a *agents) fail(pod string, failing bool) {
	a.mu.Lock()
	a.failing[pod] = failing
	a.mu.Unlock()
}

// Metrics implements Source: over HTTPS verified with the server's
// certificate, with the agents' token, as instance.PodAgents does at the
// pod's IP.
func (a *agents) Metrics(ctx context.Context, _ *dbv1.Database, pod *corev1.Pod) (map[string]*dto.MetricFamily, error) {
	return agentapi.Client{HTTP: a.srv.Client(), Token: "tok"}.Metrics(ctx, a.srv.URL+"/"+pod.Name, agentapi.MetricsOptions{})
}

func scheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	require.NoError(t, dbv1.AddToScheme(s))
	return s
}

func database(ns, name string) *dbv1.Database {
	return &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: dbv1.DatabaseSpec{Engine: dbv1.EnginePostgres}}
}

func enginePod(db *dbv1.Database, ordinal int) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: resources.InstanceName(db, ordinal),
		Labels: resources.Labels(db, resources.ComponentDatabase)}, Status: corev1.PodStatus{PodIP: "10.0.0.1"}}
}

// TestScraperRelabelsEveryInstance: the manager's registry holds every
// engine pod's series from its agent, labelled with its namespace,
// Database and pod (an agent's own database label kept as
// exported_database), and only those named dbkeeper_postgres_*; a failed
// scrape sets scrape_up 0 and keeps the last values once, drops them the
// second time in a row; a pod that is gone loses its series and its
// scrape_up.
func TestScraperRelabelsEveryInstance(t *testing.T) {
	orders, other := database("shop", "orders"), database("shop", "other")
	backupPod := enginePod(orders, 0)
	backupPod.Name, backupPod.Labels = "orders-backup-1-x", resources.Labels(orders, resources.ComponentBackup)
	orphan := enginePod(database("shop", "gone"), 0) // its Database is gone
	c := fake.NewClientBuilder().WithScheme(scheme(t)).
		WithObjects(orders, other, enginePod(orders, 0), enginePod(orders, 1), enginePod(other, 0), backupPod, orphan).Build()
	agents := newAgents(t)
	reg := prometheus.NewPedanticRegistry()
	s, err := New(c, agents, Options{Interval: time.Hour, Registerer: reg, Log: testr.New(t)})
	require.NoError(t, err)
	ctx := context.Background()

	s.round(ctx)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP dbkeeper_instance_scrape_up 1 when the manager's last scrape of the instance's agent succeeded, else 0: after one failure the instance's dbkeeper_postgres_* series are its previous scrape's, after two in a row they are left out until a scrape succeeds.
# TYPE dbkeeper_instance_scrape_up gauge
dbkeeper_instance_scrape_up{database="orders",namespace="shop",pod="orders-0"} 1
dbkeeper_instance_scrape_up{database="orders",namespace="shop",pod="orders-1"} 1
dbkeeper_instance_scrape_up{database="other",namespace="shop",pod="other-0"} 1
# HELP dbkeeper_postgres_role 1, labelled with the role the server runs as.
# TYPE dbkeeper_postgres_role gauge
dbkeeper_postgres_role{database="orders",namespace="shop",pod="orders-0",role="primary"} 1
dbkeeper_postgres_role{database="orders",namespace="shop",pod="orders-1",role="primary"} 1
dbkeeper_postgres_role{database="other",namespace="shop",pod="other-0",role="primary"} 1
# HELP dbkeeper_postgres_xact_commits_total Transactions committed in the database.
# TYPE dbkeeper_postgres_xact_commits_total counter
dbkeeper_postgres_xact_commits_total{database="orders",datname="app",namespace="shop",pod="orders-0"} 42
dbkeeper_postgres_xact_commits_total{database="orders",datname="app",namespace="shop",pod="orders-1"} 42
dbkeeper_postgres_xact_commits_total{database="other",datname="app",namespace="shop",pod="other-0"} 42
# HELP dbkeeper_postgres_legacy_size A series of an agent that labelled its databases database.
# TYPE dbkeeper_postgres_legacy_size gauge
dbkeeper_postgres_legacy_size{database="orders",exported_database="app",namespace="shop",pod="orders-0"} 7
dbkeeper_postgres_legacy_size{database="orders",exported_database="app",namespace="shop",pod="orders-1"} 7
dbkeeper_postgres_legacy_size{database="other",exported_database="app",namespace="shop",pod="other-0"} 7
`), "dbkeeper_instance_scrape_up", "dbkeeper_postgres_role", "dbkeeper_postgres_xact_commits_total", "dbkeeper_postgres_legacy_size", "go_goroutines"))
	assert.Equal(t, 3, testutil.CollectAndCount(s.store, "dbkeeper_postgres_up"))
	assert.Equal(t, 1, testutil.CollectAndCount(s.store, "dbkeeper_instance_scrape_round_duration_seconds"))

	up := func(pod string) (scrapeUp float64, series int) {
		t.Helper()
		families, err := reg.Gather()
		require.NoError(t, err, "a gather never fails")
		scrapeUp = -1
		for _, f := range families {
			for _, m := range f.GetMetric() {
				if !hasLabel(m, LabelPod, pod) {
					continue
				}
				if f.GetName() == "dbkeeper_instance_scrape_up" {
					scrapeUp = m.GetGauge().GetValue()
				} else {
					series++
				}
			}
		}
		return scrapeUp, series
	}
	scrapeUp, series := up("orders-1")
	assert.Equal(t, 1.0, scrapeUp)
	assert.Equal(t, 4, series, "up, role, commits, legacy size")

	agents.fail("orders-1", true)
	s.round(ctx)
	scrapeUp, series = up("orders-1")
	assert.Zero(t, scrapeUp, "the scrape failed")
	assert.Equal(t, 4, series, "one failure keeps the last values")
	s.round(ctx)
	scrapeUp, series = up("orders-1")
	assert.Zero(t, scrapeUp)
	assert.Zero(t, series, "a second failure in a row drops them")
	scrapeUp, series = up("orders-0")
	assert.Equal(t, 1.0, scrapeUp, "another instance is not affected")
	assert.Equal(t, 4, series)

	agents.fail("orders-1", false)
	s.round(ctx)
	scrapeUp, series = up("orders-1")
	assert.Equal(t, 1.0, scrapeUp, "scraped again")
	assert.Equal(t, 4, series)

	require.NoError(t, c.Delete(ctx, enginePod(orders, 1)))
	s.round(ctx)
	scrapeUp, series = up("orders-1")
	assert.Equal(t, -1.0, scrapeUp, "a pod that is gone has no scrape_up")
	assert.Zero(t, series, "nor series")
	assert.Equal(t, 2, testutil.CollectAndCount(s.store, "dbkeeper_postgres_up"))

	// agents that do not answer, one of them a pod without an IP yet:
	// scrape_up 0 for every instance, and no series
	pending := enginePod(other, 1)
	pending.Status.PodIP = ""
	require.NoError(t, c.Create(ctx, pending))
	s2, err := New(c, unreachable{}, Options{Interval: time.Hour, Registerer: prometheus.NewPedanticRegistry(), Log: testr.New(t)})
	require.NoError(t, err)
	s2.round(ctx)
	assert.Equal(t, 3, testutil.CollectAndCount(s2.store, "dbkeeper_instance_scrape_up"))
	assert.Zero(t, testutil.CollectAndCount(s2.store, "dbkeeper_postgres_up"))
}

// unreachable is a Source whose agents never answer.
type unreachable struct{}

func (unreachable) Metrics(context.Context, *dbv1.Database, *corev1.Pod) (map[string]*dto.MetricFamily, error) {
	return nil, errors.New("connection refused")
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// slowSource answers after a pause and counts the scrapes that run at
// once, overall and per pod.
type slowSource struct {
	pause time.Duration

	mu             sync.Mutex
	running        int
	maxRunning     int
	perPod         map[string]int
	maxPerPod      int
	scrapes        int
	deadlineMissed bool
}

func (s *slowSource) Metrics(ctx context.Context, _ *dbv1.Database, pod *corev1.Pod) (map[string]*dto.MetricFamily, error) {
	s.mu.Lock()
	s.running++
	s.perPod[pod.Name]++
	s.maxRunning = max(s.maxRunning, s.running)
	s.maxPerPod = max(s.maxPerPod, s.perPod[pod.Name])
	s.scrapes++
	_, hasDeadline := ctx.Deadline()
	s.deadlineMissed = s.deadlineMissed || !hasDeadline
	s.mu.Unlock()
	time.Sleep(s.pause)
	s.mu.Lock()
	s.running--
	s.perPod[pod.Name]--
	s.mu.Unlock()
	return nil, nil
}

// TestScraperBoundsItsScrapes: Start scrapes Concurrency agents at a
// time, each within a deadline, never one pod twice at once even when a
// round takes longer than the interval, and drops every series once it
// stops.
func TestScraperBoundsItsScrapes(t *testing.T) {
	db := database("shop", "orders")
	objs := []client.Object{db}
	for i := range 10 {
		objs = append(objs, enginePod(db, i))
	}
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(objs...).Build()
	src := &slowSource{pause: 20 * time.Millisecond, perPod: map[string]int{}}
	s, err := New(c, src, Options{Interval: 10 * time.Millisecond, Registerer: prometheus.NewPedanticRegistry(), Log: testr.New(t)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	require.Eventually(t, func() bool {
		src.mu.Lock()
		defer src.mu.Unlock()
		return src.scrapes >= 30
	}, 10*time.Second, 10*time.Millisecond, "three rounds")
	assert.Equal(t, 10, testutil.CollectAndCount(s.store, "dbkeeper_instance_scrape_up"))
	cancel()
	require.NoError(t, <-done)
	src.mu.Lock()
	defer src.mu.Unlock()
	assert.LessOrEqual(t, src.maxRunning, DefaultConcurrency, "4 at a time")
	assert.Greater(t, src.maxRunning, 1, "more than one at a time")
	assert.Equal(t, 1, src.maxPerPod, "one scrape of a pod at a time")
	assert.False(t, src.deadlineMissed, "every scrape has a deadline")
	assert.Zero(t, testutil.CollectAndCount(s.store), "a stopped scraper serves nothing")
}
