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

// The archive's metrics, for Databases with spec.backup.objectStore; a
// dashboard or an alert reads them as they are (docs/design/backup.md):
// `time() - dbkeeper_database_archive_last_archived_timestamp_seconds`
// against archiveTimeout, failing == 1 for minutes, the pending WAL
// against the volume.
var (
	lastArchivedDesc = prometheus.NewDesc(
		"dbkeeper_database_archive_last_archived_timestamp_seconds",
		"When the primary last archived a WAL segment to the object store, in seconds since the epoch.",
		[]string{"namespace", "name"}, nil)
	archiveFailingDesc = prometheus.NewDesc(
		"dbkeeper_database_archive_failing",
		"1 when the primary's last archive attempt failed (BackupReady says why), else 0.",
		[]string{"namespace", "name"}, nil)
	pendingWALDesc = prometheus.NewDesc(
		"dbkeeper_database_archive_pending_wal_bytes",
		"The size of the primary's pg_wal, which grows while archiving fails.",
		[]string{"namespace", "name"}, nil)
	firstRecoverableDesc = prometheus.NewDesc(
		"dbkeeper_database_first_recoverability_point_timestamp_seconds",
		"The earliest time a point-in-time recovery can reach, in seconds since the epoch.",
		[]string{"namespace", "name"}, nil)
	baseBackupsDesc = prometheus.NewDesc(
		"dbkeeper_database_base_backups",
		"The number of base backups in the Database's repository.",
		[]string{"namespace", "name"}, nil)
	lastVerifiedDesc = prometheus.NewDesc(
		"dbkeeper_database_backup_last_verification_timestamp_seconds",
		"When the newest verification restore of the Database's backup finished, in seconds since the epoch.",
		[]string{"namespace", "name"}, nil)
	verificationFailedDesc = prometheus.NewDesc(
		"dbkeeper_database_backup_verification_failed",
		"1 when the newest finished verification restore failed (BackupReady says why), else 0.",
		[]string{"namespace", "name"}, nil)
)

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

func (c *statusCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{lastSuccessDesc, lastArchivedDesc, archiveFailingDesc, pendingWALDesc, firstRecoverableDesc, baseBackupsDesc, lastVerifiedDesc, verificationFailedDesc} {
		ch <- d
	}
}

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
		b := db.Status.Backup
		if b == nil {
			continue
		}
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, db.Namespace, db.Name)
		}
		if b.LastSuccessfulTime != nil {
			gauge(lastSuccessDesc, float64(b.LastSuccessfulTime.Unix()))
		}
		if b.RepositoryPath == "" {
			continue
		}
		gauge(baseBackupsDesc, float64(b.BaseBackups))
		if b.FirstRecoverabilityPoint != nil {
			gauge(firstRecoverableDesc, float64(b.FirstRecoverabilityPoint.Unix()))
		}
		if v := b.LastVerification; v != nil && v.Finished != nil {
			gauge(lastVerifiedDesc, float64(v.Finished.Unix()))
			failed := 0.0
			if !v.Succeeded {
				failed = 1
			}
			gauge(verificationFailedDesc, failed)
		}
		if a := b.Archive; a != nil {
			if a.LastArchivedTime != nil {
				gauge(lastArchivedDesc, float64(a.LastArchivedTime.Unix()))
			}
			failing := 0.0
			if a.LastFailedTime != nil && (a.LastArchivedTime == nil || a.LastFailedTime.After(a.LastArchivedTime.Time)) {
				failing = 1
			}
			gauge(archiveFailingDesc, failing)
			gauge(pendingWALDesc, float64(a.PendingWALBytes))
		}
	}
}
