// Package instancemetrics serves the PostgreSQL metrics of every instance
// through the manager (docs/design/metrics.md, option 2): a Runnable of
// the manager scrapes the agent of each engine pod (agentapi.MetricsPath,
// behind the agents' token) on its own pace, a few at a time, and a Store
// serves the last values on the manager's /metrics, labelled with the
// instance's namespace, Database and pod. No pod gets a new right, and
// Prometheus has one target.
package instancemetrics

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// Source reads the metrics an instance's agent serves; instance.PodAgents
// is the manager's.
type Source interface {
	// Metrics returns the metric families the agent of pod serves.
	Metrics(ctx context.Context, db *dbv1.Database, pod *corev1.Pod) (map[string]*dto.MetricFamily, error)
}

var _ Source = instance.PodAgents{}

// The defaults of Options.
const (
	DefaultConcurrency = 4
	DefaultTimeout     = 10 * time.Second
)

// Options configure a Scraper.
type Options struct {
	// Interval is the pause between the starts of two rounds of scrapes;
	// a round that takes longer is followed at once by the next.
	Interval time.Duration
	// Concurrency is how many agents are scraped at once; zero is
	// DefaultConcurrency.
	Concurrency int
	// Timeout bounds one scrape; zero is DefaultTimeout.
	Timeout time.Duration
	// Registerer gets the Store; nil is controller-runtime's
	// metrics.Registry, which the manager serves on /metrics.
	Registerer prometheus.Registerer
	// Log is the scraper's logger.
	Log logr.Logger
}

// Scraper is the manager's Runnable that scrapes every engine pod of the
// Databases it knows (its cache) every Interval, and keeps the last
// values in a Store. Rounds follow each other, so an instance is never
// scraped twice at once.
type Scraper struct {
	pods   client.Reader
	source Source
	o      Options
	store  *Store
}

var (
	_ manager.Runnable               = (*Scraper)(nil)
	_ manager.LeaderElectionRunnable = (*Scraper)(nil)
)

// New returns a Scraper of the engine pods and Databases pods reads (the
// manager's cache) through source, its Store registered with
// o.Registerer.
func New(pods client.Reader, source Source, o Options) (*Scraper, error) {
	if o.Interval <= 0 {
		return nil, fmt.Errorf("invalid instance metrics interval %s: must be positive", o.Interval)
	}
	o.Concurrency = cmp.Or(o.Concurrency, DefaultConcurrency)
	o.Timeout = cmp.Or(o.Timeout, DefaultTimeout)
	if o.Registerer == nil {
		o.Registerer = metrics.Registry
	}
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	s := &Scraper{pods: pods, source: source, o: o, store: NewStore()}
	if err := o.Registerer.Register(s.store); err != nil {
		return nil, fmt.Errorf("registering the instance metrics: %w", err)
	}
	return s, nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: only the
// leader scrapes, so that the agents are not scraped once per replica of
// the manager; a follower serves no instance series.
func (s *Scraper) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable: a round of scrapes at once, then one
// every Interval, until ctx ends; the series are dropped then.
func (s *Scraper) Start(ctx context.Context) error {
	s.o.Log.Info("Starting to scrape the instances' metrics", "interval", s.o.Interval, "concurrency", s.o.Concurrency)
	defer s.store.Reset()
	tick := time.NewTicker(s.o.Interval)
	defer tick.Stop()
	for {
		s.round(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// target is one instance to scrape.
type target struct {
	db  *dbv1.Database
	pod *corev1.Pod
}

// key is t's Target in the store.
func (t target) key() Target {
	return Target{Namespace: t.pod.Namespace, Database: t.db.Name, Pod: t.pod.Name}
}

// round scrapes every instance once, Concurrency at a time, after
// dropping the series of the instances whose pods are gone.
func (s *Scraper) round(ctx context.Context) {
	start := time.Now()
	targets, err := s.targets(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.o.Log.Error(err, "Cannot list the instances to scrape")
		}
		return
	}
	keys := make([]Target, len(targets))
	for i, t := range targets {
		keys[i] = t.key()
	}
	s.store.Keep(keys)
	slots := make(chan struct{}, s.o.Concurrency)
	var wg sync.WaitGroup
	for _, t := range targets {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Go(func() {
			defer func() { <-slots }()
			s.scrape(ctx, t)
		})
	}
	wg.Wait()
	s.store.SetRoundDuration(time.Since(start))
}

// scrape scrapes one instance within Timeout and records the result,
// saying in the log when its scrapes begin to fail and when they succeed
// again (a pod without an IP yet, only at V(1)).
func (s *Scraper) scrape(ctx context.Context, t target) {
	scrapeCtx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	families, err := s.source.Metrics(scrapeCtx, t.db, t.pod)
	if ctx.Err() != nil {
		return // stopping: not the instance's failure
	}
	failedBefore := s.store.Record(t.key(), families, err)
	log := s.o.Log.WithValues("Pod", klog.KObj(t.pod), "Database", klog.KObj(t.db))
	switch {
	case err != nil && failedBefore == 0 && errors.Is(err, instance.ErrNotReady):
		log.V(1).Info("Cannot scrape an instance's metrics", "error", err.Error())
	case err != nil && failedBefore == 0:
		log.Info("Cannot scrape an instance's metrics", "error", err.Error())
	case err == nil && failedBefore > 0:
		log.Info("Scraped an instance's metrics again", "failedScrapes", failedBefore)
	}
}

// targets are the engine pods of the Databases the cache holds, by
// namespace and name.
func (s *Scraper) targets(ctx context.Context) ([]target, error) {
	dbs := &dbv1.DatabaseList{}
	if err := s.pods.List(ctx, dbs, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the Databases: %w", err)
	}
	byName := make(map[types.NamespacedName]*dbv1.Database, len(dbs.Items))
	for i := range dbs.Items {
		db := &dbs.Items[i]
		byName[types.NamespacedName{Namespace: db.Namespace, Name: db.Name}] = db
	}
	pods := &corev1.PodList{}
	if err := s.pods.List(ctx, pods, client.UnsafeDisableDeepCopy, client.MatchingLabels{
		resources.LabelManagedBy: resources.ManagedBy, resources.LabelComponent: resources.ComponentDatabase}); err != nil {
		return nil, fmt.Errorf("listing the engine pods: %w", err)
	}
	var targets []target
	for i := range pods.Items {
		pod := &pods.Items[i]
		db := byName[types.NamespacedName{Namespace: pod.Namespace, Name: pod.Labels[resources.LabelInstance]}]
		if db == nil || !labels.SelectorFromSet(resources.PodSelectorLabels(db)).Matches(labels.Set(pod.Labels)) {
			continue
		}
		if _, ok := resources.InstanceOrdinal(db, pod.Name); !ok {
			continue
		}
		targets = append(targets, target{db: db, pod: pod})
	}
	slices.SortFunc(targets, func(a, b target) int {
		return cmp.Or(cmp.Compare(a.pod.Namespace, b.pod.Namespace), cmp.Compare(a.pod.Name, b.pod.Name))
	})
	return targets, nil
}
