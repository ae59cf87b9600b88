package realnode

import (
	"context"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
	"github.com/dbkeeper/dbkeeper/test/framework/faults"
)

// getPod reads one pod of the Database as it is now.
func getPod(t require.TestingT, db *dbv1.Database, name string) *corev1.Pod {
	pod := &corev1.Pod{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: db.Namespace, Name: name}, pod))
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
	target, err := dbtest.PodTarget(context.Background(), k8s, getPod(t, db, name), resources.SuperuserSecretName(db),
		resources.GeneratedSecretName(db), name+"."+resources.HeadlessServiceName(db)+"."+db.Namespace+".svc")
	require.NoError(t, err)
	return target
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
