package backup

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// lastSuccessDesc is the gauge of the last successful backup of each
// Database, for alerts such as `time() - dbkeeper_..._seconds > 26*3600`.
var lastSuccessDesc = prometheus.NewDesc(
	"dbkeeper_database_last_successful_backup_timestamp_seconds",
	"When the last successful backup Job of the Database completed, in seconds since the epoch.",
	[]string{"namespace", "name"}, nil)

// statusCollector reads status.backup of every cached Database at scrape
// time, so that a deleted Database's series goes with it.
type statusCollector struct {
	mu     sync.Mutex
	reader client.Reader
}

var (
	collector    = &statusCollector{}
	registerOnce sync.Once
)

// registerMetrics makes the metrics endpoint report from reader (the
// manager's cache); the last manager set up in a process wins.
func registerMetrics(reader client.Reader) {
	collector.mu.Lock()
	collector.reader = reader
	collector.mu.Unlock()
	registerOnce.Do(func() { metrics.Registry.MustRegister(collector) })
}

func (c *statusCollector) Describe(ch chan<- *prometheus.Desc) { ch <- lastSuccessDesc }

func (c *statusCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	reader := c.reader
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list := &dbv1.DatabaseList{}
	err := reader.List(ctx, list)
	if errors.As(err, new(*cache.ErrCacheNotStarted)) {
		// A manager that has not started its cache yet has no Databases
		// to report; failing here would fail the whole scrape.
		return
	}
	if err != nil {
		ch <- prometheus.NewInvalidMetric(lastSuccessDesc, err)
		return
	}
	for _, db := range list.Items {
		if b := db.Status.Backup; b != nil && b.LastSuccessfulTime != nil {
			ch <- prometheus.MustNewConstMetric(lastSuccessDesc, prometheus.GaugeValue,
				float64(b.LastSuccessfulTime.Unix()), db.Namespace, db.Name)
		}
	}
}
