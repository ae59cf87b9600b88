package realnode

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
)

// rows is what fillItems writes and countItems reads back.
const rows = "100|5050"

func fillItems(t *testing.T, conn dbtest.Conn) {
	t.Helper()
	query(t, conn, "CREATE TABLE items (id int PRIMARY KEY, note text NOT NULL); "+
		"INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 100) g")
	require.Equal(t, rows, countItems(t, conn))
}

func countItems(t *testing.T, conn dbtest.Conn) string {
	t.Helper()
	return queryEventually(t, conn, "SELECT count(*), sum(id) FROM items")
}

// TestReadyMeansServing: a Database of each major Debian ships is Ready only
// when its server answers through the client Service, and it is the major
// asked for. The newest runs a primary and a streaming standby.
func TestReadyMeansServing(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startOperator(t, ns)
	for _, version := range []string{"15", "17", "18"} {
		t.Run("postgres-"+version, func(t *testing.T) {
			t.Parallel()
			db := newDatabase(ns, "pg"+version, version)
			if version == "18" {
				db.Spec.Replicas = ptr.To[int32](2)
			}
			create(t, db)
			waitReady(t, db)
			// no retry: Ready must mean the server answers now
			out, err := psql.Query(context.Background(), generated(db), "SHOW server_version_num", queryTimeout)
			require.NoError(t, err)
			assert.Equal(t, version, out[:2], "server_version_num %s", out)
			if version == "18" {
				waitTopology(t, db, "", 2)
			}
		})
	}
}

// TestDataSurvivesRestarts: rows written through the client Service with
// the generated Secret's uri are there after the pod is deleted, after
// scaling to 0 and back, and after the operator restarts.
func TestDataSurvivesRestarts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := newNamespace(t)
	op := startOperator(t, ns)
	db := newDatabase(ns, "orders", "17")
	create(t, db)
	waitReady(t, db)
	conn := generated(db)
	fillItems(t, conn)

	t.Log("the pod is deleted")
	pod := &corev1.Pod{}
	key := types.NamespacedName{Namespace: ns, Name: resources.StatefulSetName(db) + "-0"}
	require.NoError(t, k8s.Get(ctx, key, pod))
	old := pod.UID
	require.NoError(t, k8s.Delete(ctx, pod))
	require.Eventually(t, func() bool {
		return k8s.Get(ctx, key, pod) == nil && pod.UID != old && podReady(pod)
	}, timeout, 200*time.Millisecond, "a new pod Ready")
	waitReady(t, db)
	assert.Equal(t, rows, countItems(t, conn), "after the pod was deleted")

	t.Log("scaled to 0 and back to 1")
	dbtest.Patch(t, k8s, db, func(d *dbv1.Database) { d.Spec.Replicas = ptr.To[int32](0) })
	waitCondition(t, db, dbv1.ConditionStatefulSetReady, metav1.ConditionTrue, dbv1.ReasonScaledToZero)
	require.Eventually(t, func() bool { return k8s.Get(ctx, key, pod) != nil }, timeout, 200*time.Millisecond, "the pod gone")
	dbtest.Patch(t, k8s, db, func(d *dbv1.Database) { d.Spec.Replicas = ptr.To[int32](1) })
	waitCondition(t, db, dbv1.ConditionStatefulSetReady, metav1.ConditionTrue, dbv1.ReasonStatefulSetReady)
	waitReady(t, db)
	assert.Equal(t, rows, countItems(t, conn), "after scaling to 0 and back")

	t.Log("the operator restarts, and the pod is deleted while it is away")
	op.Stop()
	require.NoError(t, k8s.Get(ctx, key, pod))
	old = pod.UID
	require.NoError(t, k8s.Delete(ctx, pod))
	startOperator(t, ns)
	require.Eventually(t, func() bool {
		return k8s.Get(ctx, key, pod) == nil && pod.UID != old && podReady(pod)
	}, timeout, 200*time.Millisecond, "a new pod Ready")
	waitReady(t, db)
	assert.Equal(t, rows, countItems(t, conn), "after the operator restarted")
	query(t, conn, "INSERT INTO items VALUES (101, 'after restarts')")
	assert.Equal(t, "101|5151", countItems(t, conn), "the server takes writes")
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podsOf lists the pods of a Database's StatefulSet.
func podsOf(t *testing.T, db *dbv1.Database) []corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	require.NoError(t, k8s.List(context.Background(), pods, client.InNamespace(db.Namespace), client.MatchingLabels(resources.PodSelectorLabels(db))))
	return pods.Items
}
