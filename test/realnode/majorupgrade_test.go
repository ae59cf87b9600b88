package realnode

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
)

// waitMajorUpgrade waits until status.replication.majorUpgrade reaches
// phase for the upgrade to to, and returns the Database then.
func waitMajorUpgrade(t *testing.T, db *dbv1.Database, to string, phase dbv1.MajorUpgradePhase) *dbv1.Database {
	t.Helper()
	var live *dbv1.Database
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		live = dbtest.Get(ct, k8s, db)
		var mu *dbv1.MajorUpgradeStatus
		if r := live.Status.Replication; r != nil {
			mu = r.MajorUpgrade
		}
		if assert.NotNil(ct, mu, "status.replication.majorUpgrade") {
			assert.Equal(ct, to, mu.To)
			assert.Equal(ct, phase, mu.Phase, "majorUpgrade: %s", mu.Message)
		}
	}, 3*timeout, time.Second, "the major upgrade to %s %s", to, phase)
	return live
}

// writesAgain waits until w has a write acknowledged after since.
func writesAgain(t *testing.T, w *dbtest.Writer, since time.Time) {
	t.Helper()
	require.Eventually(t, func() bool { _, ok := w.FirstAckAfter(since); return ok }, timeout, 50*time.Millisecond,
		"a write acknowledged through the read-write Service after the upgrade: %s", w.Describe())
}

// logUpgradeSteps logs when the primary's agent began each step of its
// upgrade (where the seconds of the downtime go).
func logUpgradeSteps(t *testing.T, db *dbv1.Database, pod string) {
	t.Helper()
	raw, err := psql.Clientset.CoreV1().Pods(db.Namespace).GetLogs(pod, &corev1.PodLogOptions{Container: resources.EngineContainer}).DoRaw(context.Background())
	if err != nil {
		t.Logf("the log of %s: %v", pod, err)
		return
	}
	for _, line := range strings.Split(string(raw), "\n") {
		var rec struct {
			T    string `json:"ts"`
			M    string `json:"msg"`
			Step string `json:"step"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil || rec.M == "" {
			continue
		}
		switch {
		case rec.M == "Major upgrade", strings.HasPrefix(rec.M, "Starting the agent"), strings.HasPrefix(rec.M, "Holding the primary lease"),
			strings.HasPrefix(rec.M, "Upgraded the data directory"), strings.HasPrefix(rec.M, "Started the server"), rec.M == "The server accepts connections",
			strings.HasPrefix(rec.M, "The major upgrade"):
			t.Logf("STEP %s %s %s", rec.T, rec.M, rec.Step)
		}
	}
}

// TestMajorUpgradeInPlace: raising spec.version upgrades the data
// directory in place with pg_upgrade (docs/design/major-upgrades.md).
func TestMajorUpgradeInPlace(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startOperator(t, ns)

	// 17 to 18 with an extension and a declared role: every acknowledged
	// row on 18, the extension's objects usable, the role logging in;
	// going back down is refused.
	t.Run("17-to-18", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		pw := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reader-pw",
			Annotations: map[string]string{dbv1.AnnotationCredentialsFor: "up"}},
			StringData: map[string]string{"password": "declared-reader-pw"}}
		create(t, pw)
		db := newDatabase(ns, "up", "17", func(d *dbv1.Database) {
			d.Spec.PostgreSQL.Extensions = []dbv1.ExtensionSpec{{Name: "vector"}}
			d.Spec.Roles = []dbv1.RoleSpec{{Name: "reader", PasswordSecret: &dbv1.PasswordSecretRef{Name: pw.Name}, InRoles: []string{"pg_read_all_data"}}}
		})
		create(t, db)
		waitReady(t, db)
		waitCondition(t, db, dbv1.ConditionExtensionsReady, metav1.ConditionTrue, dbv1.ReasonExtensionsReconciled)
		waitCondition(t, db, dbv1.ConditionRolesReady, metav1.ConditionTrue, dbv1.ReasonRolesReconciled)
		rw := serviceTarget(t, db, resources.ClientServiceName(db))
		fillItems(t, generated(db))
		for _, sql := range []string{
			"CREATE TABLE embeddings (id int PRIMARY KEY, v vector(3))",
			"INSERT INTO embeddings VALUES (1, '[1,2,3]'), (2, '[3,1,2]'), (3, '[9,9,9]')",
		} {
			sqlValue(t, rw, sql)
		}
		w, err := dbtest.StartWriterWithTimeout(ctx, rw, "acks", 2*time.Second)
		require.NoError(t, err)
		defer w.Stop()

		start := time.Now()
		dbtest.Patch(t, k8s, db, func(d *dbv1.Database) { d.Spec.Version = "18" })
		done := waitMajorUpgrade(t, db, "18", dbv1.MajorUpgradeSucceeded)
		upgraded := time.Since(start)
		waitReady(t, db)
		whole := time.Since(start)
		// Ready comes before the Service routes to the new server: the
		// writer's next acknowledgement ends the outage it measures
		writesAgain(t, w, time.Now())
		w.Stop()
		t.Logf("MEASURED major upgrade 17 to 18 of 1 instance: primary on 18 after %s, Ready after %s, writes unavailable at most %s (%s); %s",
			upgraded.Round(time.Second), whole.Round(time.Second), w.LongestGap(start).Round(time.Millisecond), w.Describe(), done.Status.Replication.MajorUpgrade.Message)
		missing, err := w.Missing(ctx, rw)
		require.NoError(t, err)
		assert.Empty(t, missing, "acknowledged ids lost by the upgrade")
		logUpgradeSteps(t, db, done.Status.Replication.MajorUpgrade.Primary)

		assert.Equal(t, "18", sqlValue(t, rw, "SHOW server_version_num")[:2], "the primary runs 18")
		assert.Equal(t, rows, countItems(t, generated(db)), "every row on 18")
		assert.Equal(t, "2", sqlValue(t, rw, "SELECT id FROM embeddings ORDER BY v <-> '[3,1,1]' LIMIT 1"), "vector's index operators on 18")
		reader := rw
		reader.User, reader.Password = "reader", "declared-reader-pw"
		assert.Equal(t, "100", sqlValue(t, reader, "SELECT count(*) FROM items"), "the declared role logs in on 18 with its password")
		assert.Contains(t, done.Status.Replication.MajorUpgrade.Message, "link", "the method is said")

		t.Log("going back to 17 is refused at admission")
		live := dbtest.Get(t, k8s, db)
		live.Spec.Version = "17"
		err = k8s.Update(ctx, live)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "spec.version cannot go down")
	})

	// 15 to 17 refused by pg_upgrade --check (a column of a reg* type,
	// whose OIDs pg_upgrade cannot keep): the Database serves 15 with
	// every row and says why; spec.version may go back to 15, and once
	// the cause is gone 17 upgrades.
	t.Run("15-to-17-refused", func(t *testing.T) {
		t.Parallel()
		db := newDatabase(ns, "refused", "15")
		create(t, db)
		waitReady(t, db)
		fillItems(t, generated(db))
		rw := serviceTarget(t, db, resources.ClientServiceName(db))
		sqlValue(t, rw, "CREATE TABLE procs (p regproc); INSERT INTO procs VALUES ('now')")

		start := time.Now()
		dbtest.Patch(t, k8s, db, func(d *dbv1.Database) { d.Spec.Version = "17" })
		failed := waitMajorUpgrade(t, db, "17", dbv1.MajorUpgradeFailed)
		t.Logf("MEASURED refused major upgrade 15 to 17: failed after %s: %s", time.Since(start).Round(time.Second), failed.Status.Replication.MajorUpgrade.Message)
		assert.Contains(t, failed.Status.Replication.MajorUpgrade.Message, "reg", "the failing check is named")
		cond := waitCondition(t, db, dbv1.ConditionReplicationReady, metav1.ConditionFalse, dbv1.ReasonMajorUpgradeFailed)
		assert.Contains(t, cond.Message, "serves PostgreSQL 15")
		assert.Equal(t, "15", sqlValue(t, rw, "SHOW server_version_num")[:2], "still serving 15")
		assert.Equal(t, rows, countItems(t, generated(db)), "every row, on 15")

		t.Log("the cause dropped, spec.version back to 15, then 17 again")
		sqlValue(t, rw, "DROP TABLE procs")
		dbtest.Patch(t, k8s, db, func(d *dbv1.Database) { d.Spec.Version = "15" })
		waitMajorUpgrade(t, db, "17", dbv1.MajorUpgradeRolledBack)
		waitCondition(t, db, dbv1.ConditionStatefulSetReady, metav1.ConditionTrue, dbv1.ReasonStatefulSetReady)
		dbtest.Patch(t, k8s, db, func(d *dbv1.Database) { d.Spec.Version = "17" })
		waitMajorUpgrade(t, db, "17", dbv1.MajorUpgradeSucceeded)
		waitReady(t, db)
		assert.Equal(t, "17", sqlValue(t, rw, "SHOW server_version_num")[:2], "17 after the retry")
		assert.Equal(t, rows, countItems(t, generated(db)), "every row, on 17")
	})

	// 15 straight to 18 with a standby, the operator stopped and started
	// again while the upgrade runs and after the primary upgraded, and
	// the primary's pod killed while pg_upgrade links: the next pod puts
	// the old data directory back and upgrades again; the Database ends
	// on 18 with every acknowledged row, and the standby, cloned again,
	// streams on 18 with every row.
	t.Run("15-to-18-killed", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		ns := newNamespace(t)
		op := startOperator(t, ns)
		db := newDatabase(ns, "killed", "15", func(d *dbv1.Database) { d.Spec.Replicas = ptr.To[int32](2) })
		create(t, db)
		waitReady(t, db)
		primary := waitTopology(t, db, "", 2).Status.Replication.CurrentPrimary
		fillItems(t, generated(db))
		rw := serviceTarget(t, db, resources.ClientServiceName(db))
		w, err := dbtest.StartWriterWithTimeout(ctx, rw, "acks", 2*time.Second)
		require.NoError(t, err)
		defer w.Stop()
		first := getPod(t, db, primary).UID

		dbtest.Patch(t, k8s, db, func(d *dbv1.Database) { d.Spec.Version = "18" })
		waitMajorUpgrade(t, db, "18", dbv1.MajorUpgradeRunning)
		op.Stop()
		t.Log("operator stopped with the upgrade Running")
		time.Sleep(2 * time.Second)
		op = startOperator(t, ns)

		t.Log("the primary's pod killed while pg_upgrade runs")
		deadline := time.Now().Add(2 * timeout)
		for {
			require.True(t, time.Now().Before(deadline), "the primary's agent never ran pg_upgrade")
			time.Sleep(50 * time.Millisecond)
			pod := &corev1.Pod{}
			if k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: primary}, pod) != nil || pod.UID == first {
				continue
			}
			raw, err := psql.Clientset.CoreV1().Pods(ns).GetLogs(primary, &corev1.PodLogOptions{Container: resources.EngineContainer}).DoRaw(ctx)
			if err != nil || !strings.Contains(string(raw), `"step":"pg_upgrade --link"`) {
				continue
			}
			require.NoError(t, k8s.Delete(ctx, pod, client.GracePeriodSeconds(0)))
			killed := pod.UID
			t.Cleanup(func() {
				// whether the pod after it ran pg_upgrade again (killed
				// before the swap) or started the swapped directory
				again := &corev1.Pod{}
				if k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: primary}, again) != nil || again.UID == killed {
					return
				}
				raw, _ := psql.Clientset.CoreV1().Pods(ns).GetLogs(primary, &corev1.PodLogOptions{Container: resources.EngineContainer}).DoRaw(ctx)
				t.Logf("MEASURED the pod after the killed one ran pg_upgrade again: %t", strings.Contains(string(raw), `"step":"pg_upgrade --link"`))
			})
			break
		}

		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			v, err := sqlOnce(rw, "SHOW server_version_num")
			if assert.NoError(ct, err) {
				assert.Equal(ct, "18", v[:2])
			}
		}, 2*timeout, 500*time.Millisecond, "the primary serves 18")
		op.Stop()
		t.Log("operator stopped with the primary on 18")
		time.Sleep(2 * time.Second)
		startOperator(t, ns)

		done := waitMajorUpgrade(t, db, "18", dbv1.MajorUpgradeSucceeded)
		waitTopology(t, db, "", 2)
		writesAgain(t, w, time.Now())
		w.Stop()
		t.Logf("MEASURED killed major upgrade 15 to 18: %s; %s", w.Describe(), done.Status.Replication.MajorUpgrade.Message)
		missing, err := w.Missing(ctx, rw)
		require.NoError(t, err)
		assert.Empty(t, missing, "acknowledged ids lost by the killed upgrade")
		assert.Equal(t, rows, countItems(t, generated(db)), "every row on 18")
		ro := serviceTarget(t, db, resources.ReadOnlyServiceName(db))
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			v, err := sqlOnce(ro, "SELECT current_setting('server_version_num')::int / 10000 || ' ' || pg_is_in_recovery() || ' ' || (SELECT count(*) FROM items)")
			if assert.NoError(ct, err) {
				assert.Equal(ct, "18 true 100", v, "the standby runs 18 with every row")
			}
		}, timeout, time.Second)
	})
}
