//go:build failover

package realnode

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
	"github.com/dbkeeper/dbkeeper/test/framework/faults"
)

// apiServerOutage is how long TestAPIServerOutage stops the API server:
// three times the agents' renew deadline, twice the Lease's duration.
const apiServerOutage = 30 * time.Second

// TestAPIServerOutage (issue 28): the API server stopped for 30 s, as in a
// control-plane upgrade or an etcd stall, stops no healthy primary. With
// one instance there is nobody to promote, so fencing would protect
// nothing: writes go on through the outage. With three (synchronous,
// Required) every standby still sees the primary and confirms it (the
// failsafe peer check): no fence, no failover, writes go on. Afterwards
// each primary renews its Lease again as the same holder and the Database
// is whole, without a person. Before issue 28 the primary fenced itself
// 10 s into the outage and, with one instance, never served again.
//
// It does not run in parallel: everything in the cluster loses the API
// server meanwhile, and the parallel suites measure failovers.
func TestAPIServerOutage(t *testing.T) {
	if runsOf("api-server-outage", 1) == 0 {
		t.Skip("DBKEEPER_FAILOVER_FAULTS does not list api-server-outage")
	}
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns)
	solo := newDatabase(ns, "solo", "17")
	trio := newDatabase(ns, "trio", "17", func(d *dbv1.Database) {
		d.Spec.Replicas = ptr.To[int32](3)
		d.Spec.HighAvailability = dbv1.HighAvailabilitySpec{
			Failover:      ptr.To(true),
			FailoverDelay: &metav1.Duration{Duration: haFailoverDelay},
			Synchronous: &dbv1.SynchronousSpec{
				Method: dbv1.SynchronousAny, Number: 1, DataDurability: dbv1.DataDurabilityRequired,
			},
		}
	})
	dbs := []*dbv1.Database{solo, trio}
	for _, db := range dbs {
		create(t, db)
	}
	writers := map[string]*dbtest.Writer{}
	primaries := map[string]string{}
	for _, db := range dbs {
		waitReady(t, db)
		primary := resources.InstanceName(db, 0)
		waitTopology(t, db, primary, int(ptr.Deref(db.Spec.Replicas, 1)))
		primaries[db.Name] = primary
		w, err := dbtest.StartWriterWithTimeout(ctx, serviceTarget(t, db, resources.ClientServiceName(db)), "acks", writeTimeout)
		require.NoError(t, err)
		t.Cleanup(w.Stop)
		writers[db.Name] = w
	}
	for name, w := range writers {
		acks := w.AckCount()
		require.Eventually(t, func() bool { return w.AckCount() > acks+20 }, timeout, 20*time.Millisecond, "%s takes writes", name)
	}

	resume, err := faults.New(k8s).PauseAPIServer()
	require.NoError(t, err)
	t.Cleanup(func() { _ = resume() })
	at := time.Now()
	t.Logf("the API server is stopped for %s", apiServerOutage)
	time.Sleep(apiServerOutage)
	require.NoError(t, resume())
	back := time.Now()
	t.Logf("the API server runs again")
	time.Sleep(5 * time.Second)

	for _, db := range dbs {
		w := writers[db.Name]
		gap := w.LongestGap(at)
		t.Logf("MEASURED api-server-outage %s (%d instances): longest write gap %s over %s, %d writes acknowledged meanwhile",
			db.Name, ptr.Deref(db.Spec.Replicas, 1), gap.Round(time.Millisecond), apiServerOutage, ackedBetween(w, at, back))
		if !assert.Less(t, gap, 2*time.Second, "%s: writes go on through an API-server outage", db.Name) {
			logs, err := psql.Clientset.CoreV1().Pods(ns).GetLogs(primaries[db.Name], &corev1.PodLogOptions{
				Container: faults.EngineContainer, SinceTime: &metav1.Time{Time: at.Add(-5 * time.Second)}}).DoRaw(ctx)
			t.Logf("the primary %s's log since the outage (%v):\n%s", primaries[db.Name], err, logs)
		}
	}
	for _, db := range dbs {
		// the same holder renews its Lease again...
		lease := &coordinationv1.Lease{}
		require.Eventually(t, func() bool {
			if k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.LeaseName(db)}, lease) != nil {
				return false
			}
			return ptr.Deref(lease.Spec.HolderIdentity, "") == primaries[db.Name] &&
				lease.Spec.RenewTime != nil && lease.Spec.RenewTime.After(back)
		}, timeout, 250*time.Millisecond, "%s: the primary %s renews its Lease after the outage", db.Name, primaries[db.Name])
		// ...nobody failed over, and the Database is whole again
		waitTopology(t, db, primaries[db.Name], int(ptr.Deref(db.Spec.Replicas, 1)))
		if r := dbtest.Get(t, k8s, db).Status.Replication; r != nil {
			assert.Nil(t, r.LastFailover, "%s: no failover", db.Name)
		}
		waitReady(t, db)
	}
}

// ackedBetween counts w's writes acknowledged in [from, to).
func ackedBetween(w *dbtest.Writer, from, to time.Time) int {
	n := 0
	for _, id := range w.Acked() {
		if at, ok := w.AckedAt(id); ok && !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return n
}
