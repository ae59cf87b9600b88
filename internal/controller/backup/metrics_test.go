package backup

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// listErrorReader fails every List with err.
type listErrorReader struct {
	client.Reader
	err error
}

func (r listErrorReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return r.err
}

// TestCollectorBeforeTheCacheStarts: a scrape that comes before the
// manager's cache has started reports no series instead of failing the
// whole /metrics endpoint; any other read error is still reported.
func TestCollectorBeforeTheCacheStarts(t *testing.T) {
	gather := func(err error) error {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(&statusCollector{reader: listErrorReader{err: err}})
		families, gatherErr := reg.Gather()
		assert.Empty(t, families)
		return gatherErr
	}
	require.NoError(t, gather(&cache.ErrCacheNotStarted{}))
	require.ErrorContains(t, gather(errors.New("etcd is on fire")), "etcd is on fire")
}

// TestArchiveMetrics: a Database whose archive fails reports failing 1,
// its pending WAL and its last archived segment's time, and its failed
// verification; one without an object store reports no archive series.
func TestArchiveMetrics(t *testing.T) {
	archived := metav1.Unix(1_800_000_000, 0)
	failed := metav1.Unix(1_800_000_060, 0)
	withStore := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"},
		Status: dbv1.DatabaseStatus{Backup: &dbv1.BackupStatus{RepositoryPath: "/dbkeeper/shop/orders/u", BaseBackups: 2,
			Archive:          &dbv1.ArchiveStatus{LastArchivedTime: &archived, LastFailedTime: &failed, PendingWALBytes: 3 << 30},
			LastVerification: &dbv1.VerificationStatus{ID: "on-demand-1", Finished: &failed, Message: "checksum mismatch"}}}}
	dumpsOnly := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "legacy"},
		Status: dbv1.DatabaseStatus{Backup: &dbv1.BackupStatus{}}}
	scheme := runtime.NewScheme()
	require.NoError(t, dbv1.AddToScheme(scheme))
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(withStore, dumpsOnly).Build()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(&statusCollector{reader: reader})
	expected := `
# HELP dbkeeper_database_archive_failing 1 when the primary's last archive attempt failed (BackupReady says why), else 0.
# TYPE dbkeeper_database_archive_failing gauge
dbkeeper_database_archive_failing{name="orders",namespace="shop"} 1
# HELP dbkeeper_database_archive_last_archived_timestamp_seconds When the primary last archived a WAL segment to the object store, in seconds since the epoch.
# TYPE dbkeeper_database_archive_last_archived_timestamp_seconds gauge
dbkeeper_database_archive_last_archived_timestamp_seconds{name="orders",namespace="shop"} 1.8e+09
# HELP dbkeeper_database_archive_pending_wal_bytes The size of the primary's pg_wal, which grows while archiving fails.
# TYPE dbkeeper_database_archive_pending_wal_bytes gauge
dbkeeper_database_archive_pending_wal_bytes{name="orders",namespace="shop"} 3.221225472e+09
# HELP dbkeeper_database_base_backups The number of base backups in the Database's repository.
# TYPE dbkeeper_database_base_backups gauge
dbkeeper_database_base_backups{name="orders",namespace="shop"} 2
# HELP dbkeeper_database_backup_verification_failed 1 when the newest finished verification restore failed (BackupReady says why), else 0.
# TYPE dbkeeper_database_backup_verification_failed gauge
dbkeeper_database_backup_verification_failed{name="orders",namespace="shop"} 1
# HELP dbkeeper_database_backup_last_verification_timestamp_seconds When the newest verification restore of the Database's backup finished, in seconds since the epoch.
# TYPE dbkeeper_database_backup_last_verification_timestamp_seconds gauge
dbkeeper_database_backup_last_verification_timestamp_seconds{name="orders",namespace="shop"} 1.80000006e+09
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(expected),
		"dbkeeper_database_archive_failing", "dbkeeper_database_archive_last_archived_timestamp_seconds",
		"dbkeeper_database_archive_pending_wal_bytes", "dbkeeper_database_base_backups",
		"dbkeeper_database_backup_verification_failed", "dbkeeper_database_backup_last_verification_timestamp_seconds"))
}
