package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
	"github.com/dbkeeper/dbkeeper/test/framework/faults"
)

// getPod reads one pod of the Database as it is now.
func getPod(t require.TestingT, db *dbv1.Database, name string) *corev1.Pod {
	return podIn(t, db.Namespace, name)
}

// podIn reads one pod of namespace as it is now.
func podIn(t require.TestingT, namespace, name string) *corev1.Pod {
	pod := &corev1.Pod{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, pod))
	return pod
}

// restartCount is how often the kubelet restarted the engine container of
// the pod.
func restartCount(t require.TestingT, db *dbv1.Database, name string) int32 {
	for _, cs := range getPod(t, db, name).Status.ContainerStatuses {
		if cs.Name == faults.EngineContainer {
			return cs.RestartCount
		}
	}
	return 0
}

// podTarget connects straight to one instance's pod IP as the superuser,
// verifying its certificate for its name under the headless Service.
func podTarget(t require.TestingT, db *dbv1.Database, name string) sqlconn.Target {
	target, err := podTargetOf(db, name)
	require.NoError(t, err)
	return target
}

// podTargetOf is podTarget's target, or why there is none yet (the pod
// missing, or without an IP mid-restart).
func podTargetOf(db *dbv1.Database, name string) (sqlconn.Target, error) {
	pod := &corev1.Pod{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: db.Namespace, Name: name}, pod); err != nil {
		return sqlconn.Target{}, err
	}
	return dbtest.PodTarget(context.Background(), k8s, db, pod, name+"."+resources.HeadlessServiceName(db)+"."+db.Namespace+".svc")
}

// sqlWithin runs one query through target, giving up after d (connection
// included).
func sqlWithin(target sqlconn.Target, sql string, d time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	conn, err := sqlconn.Connect(ctx, target)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	v, _, err := conn.QueryValue(ctx, sql)
	if err != nil || v == nil {
		return "", err
	}
	return *v, nil
}

func procCmdline(pid int) string { return faults.Cmdline(pid) }
func procState(pid int) string   { return faults.State(pid) }
func procAlive(pid int) bool     { return faults.Alive(pid) }

// explainMissing says, for acknowledged ids of w (table in database) found missing,
// which server acknowledged each and its neighbours, which instances hold
// them now and where each instance stands, and writes every engine
// container's log (the previous run's too) into a directory that outlives
// the test: what is needed to find how an acknowledged write was lost.
func explainMissing(t *testing.T, db *dbv1.Database, w *dbtest.Writer, database, table string, missing []int64) {
	t.Helper()
	if len(missing) == 0 {
		return
	}
	for _, id := range missing {
		for n := id - 2; n <= id+2; n++ {
			at, _ := w.AckedAt(n)
			by, ok := w.AckedBy(n)
			t.Logf("id %d (missing %v): acknowledged %v at %s by %s", n, n == id, ok, at.Format("15:04:05.000"), by)
		}
	}
	ids := make([]string, len(missing))
	for i, id := range missing {
		ids[i] = strconv.FormatInt(id, 10)
	}
	for i := range int(ptr.Deref(db.Spec.Replicas, 1)) {
		name := resources.InstanceName(db, i)
		target := podTarget(t, db, name)
		target.Database = database
		v, err := sqlWithin(target, fmt.Sprintf(
			"SELECT concat_ws(' ', 'recovery', pg_is_in_recovery(), 'present', (SELECT count(*) FROM %s WHERE id IN (%s)), 'rows', (SELECT count(*) FROM %s), 'timeline', (SELECT timeline_id FROM pg_control_checkpoint()), 'insert', CASE WHEN NOT pg_is_in_recovery() THEN pg_current_wal_insert_lsn() END, 'replayed', pg_last_wal_replay_lsn(), 'started', pg_postmaster_start_time())",
			table, strings.Join(ids, ","), table), 10*time.Second)
		t.Logf("instance %s: %s %v", name, v, err)
	}
	dir, err := os.MkdirTemp("", "dbkeeper-missing-")
	require.NoError(t, err)
	for _, p := range podsOf(t, db) {
		for _, previous := range []bool{false, true} {
			logs, err := psql.Clientset.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{
				Container: faults.EngineContainer, Previous: previous}).DoRaw(context.Background())
			if err != nil {
				logs = []byte(err.Error())
			}
			require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-previous-%v.log", p.Name, previous)), logs, 0o644))
		}
	}
	t.Logf("the engine containers' logs are in %s", dir)
}

// eventSince says an Event of reason regarding db was recorded since.
func eventSince(t require.TestingT, db *dbv1.Database, reason string, since time.Time) bool {
	list := &eventsv1.EventList{}
	require.NoError(t, k8s.List(context.Background(), list, client.InNamespace(db.Namespace)))
	for _, e := range list.Items {
		if e.Reason == reason && e.Regarding.Name == db.Name && !e.CreationTimestamp.Time.Before(since.Truncate(time.Second)) {
			return true
		}
	}
	return false
}
