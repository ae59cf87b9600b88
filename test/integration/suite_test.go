// Package integration runs the dbkeeper manager against a real kube-apiserver
// and etcd (envtest, no controllers, no kubelet). Each test gets a namespace
// and an operator watching only it, with every write it makes recorded and
// every log line it prints captured, so tests can assert on both.
package integration

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/zapr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/logging"
	"github.com/dbkeeper/dbkeeper/internal/manager"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
	"github.com/dbkeeper/dbkeeper/test/framework/operator"
)

// Timeouts of Eventually: envtest answers in milliseconds, so a few seconds
// is generous, and a converged state is watched for quiet long enough for a
// stray write to show.
const (
	timeout = 20 * time.Second
	tick    = 50 * time.Millisecond
	quiet   = 2 * time.Second
)

var (
	// testEnv is the API server and etcd of the run.
	testEnv *envtest.Env
	cfg     *rest.Config
	admin   client.Client
	// operatorCfg is the least-privileged user the operators run as.
	operatorCfg *rest.Config
	// logs holds every line every operator of the run logged, at every level.
	logs = &framework.SyncBuffer{}
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipping the integration suite under -short: it needs a kube-apiserver")
		return
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(logging.Capped(zapr.NewLogger(newCapturingLogger("global"))))
	env, c, err := envtest.Start()
	testEnv = env
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}()
	cfg = c
	admin, err = client.New(cfg, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "admin client:", err)
		return 1
	}
	if operatorCfg, err = operatorConfig(env.Environment); err != nil {
		fmt.Fprintln(os.Stderr, "operator user:", err)
		return 1
	}
	code := m.Run()
	if r := refused.All(); len(r) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: the API server refused %d requests of the operator (its generated ClusterRole lacks them):\n  %s\n",
			len(r), strings.Join(r, "\n  "))
		code = max(code, 1)
	}
	return code
}

// newCapturingLogger logs every level, as JSON, into logs.
func newCapturingLogger(name string) *zap.Logger {
	enc := zapcore.NewJSONEncoder(zap.NewDevelopmentEncoderConfig())
	core := zapcore.NewCore(enc, zapcore.AddSync(logs), zap.NewAtomicLevelAt(zapcore.Level(-10)))
	return zap.New(core).Named(name)
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	return dbtest.NewNamespace(t, admin, "it-")
}

// startOperator runs the manager with the given --controllers value,
// watching namespace only, until stopped or the test ends; it logs into logs.
func startOperator(t *testing.T, namespace, controllers string) *operator.Operator {
	t.Helper()
	return operator.Start(t, operatorCfg, operator.Options{
		Controllers: controllers,
		Namespaces:  []string{namespace},
		Logger:      logging.Capped(zapr.NewLogger(newCapturingLogger("operator"))),
		// The engine pods markPodsReady fakes have addresses nothing
		// answers on.
		SkipTLSServerProbe: true,
	})
}

// newDatabase is dbtest.New.
var newDatabase = dbtest.New

func getDatabase(t require.TestingT, db *dbv1.Database) *dbv1.Database {
	return dbtest.Get(t, admin, db)
}

// condition returns the named condition of the Database as stored now.
func condition(t require.TestingT, db *dbv1.Database, condType string) *metav1.Condition {
	return meta.FindStatusCondition(getDatabase(t, db).Status.Conditions, condType)
}

func waitCondition(t *testing.T, db *dbv1.Database, condType string, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	return dbtest.WaitCondition(t, admin, db, condType, status, reason, timeout)
}

// patchDatabase is dbtest.Patch as the admin.
func patchDatabase(t *testing.T, db *dbv1.Database, mutate func(*dbv1.Database)) *dbv1.Database {
	t.Helper()
	return dbtest.Patch(t, admin, db, mutate)
}

func createDatabase(t *testing.T, db *dbv1.Database) *dbv1.Database {
	t.Helper()
	require.NoError(t, admin.Create(context.Background(), db))
	return db
}

// markStatefulSetReady plays the StatefulSet controller and kubelet, which
// envtest does not run: it reports every replica ready at the current
// revision, and creates the engine pods, Ready, for the in-memory agents
// of the in-process operator.
func markStatefulSetReady(t *testing.T, db *dbv1.Database) {
	t.Helper()
	markStatefulSetReadyWithin(t, db, timeout)
}

// markStatefulSetReadyWithin is markStatefulSetReady waiting up to wait
// for the StatefulSet.
func markStatefulSetReadyWithin(t *testing.T, db *dbv1.Database, wait time.Duration) {
	t.Helper()
	n := markStatefulSetStatusReadyWithin(t, db, wait)
	markPodsReady(t, db, n, resources.StatefulSetName(db)+"-1")
}

// markStatefulSetStatusReady is markStatefulSetReady without the pods,
// for the manager binary, which reaches real pods; it returns the replicas.
func markStatefulSetStatusReady(t *testing.T, db *dbv1.Database) int {
	t.Helper()
	return markStatefulSetStatusReadyWithin(t, db, timeout)
}

func markStatefulSetStatusReadyWithin(t *testing.T, db *dbv1.Database, wait time.Duration) int {
	t.Helper()
	sts := &appsv1.StatefulSet{}
	key := client.ObjectKey{Namespace: db.Namespace, Name: resources.StatefulSetName(db)}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		if !assert.NoError(c, admin.Get(context.Background(), key, sts)) {
			return
		}
		n := *sts.Spec.Replicas
		sts.Status = appsv1.StatefulSetStatus{
			ObservedGeneration: sts.Generation,
			Replicas:           n,
			ReadyReplicas:      n,
			AvailableReplicas:  n,
			CurrentReplicas:    n,
			UpdatedReplicas:    n,
			CurrentRevision:    sts.Name + "-1",
			UpdateRevision:     sts.Name + "-1",
		}
		assert.NoError(c, admin.Status().Update(context.Background(), sts))
	}, wait, tick)
	return int(*sts.Spec.Replicas)
}

// markPodsReady plays the StatefulSet controller and kubelet for the
// replication controller: the engine pods exist, with an IP, Ready, at
// revision; their agents are the operator's in-memory ones.
func markPodsReady(t *testing.T, db *dbv1.Database, n int, revision string) {
	t.Helper()
	ctx := context.Background()
	for ord := range n {
		name := resources.InstanceName(db, ord)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			pod := &corev1.Pod{}
			err := admin.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, pod)
			if apierrors.IsNotFound(err) {
				pod = &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: name, Labels: resources.Labels(db, resources.ComponentDatabase)},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "postgres:17"}}},
				}
				pod.Labels[appsv1.ControllerRevisionHashLabelKey] = revision
				err = admin.Create(ctx, pod)
			}
			if !assert.NoError(c, err) {
				return
			}
			if pod.Status.PodIP == "" {
				pod.Status.PodIP = fmt.Sprintf("198.18.0.%d", 10+ord)
			}
			ready := false
			for i := range pod.Status.Conditions {
				if pod.Status.Conditions[i].Type == corev1.PodReady {
					pod.Status.Conditions[i].Status, ready = corev1.ConditionTrue, true
				}
			}
			if !ready {
				pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
			}
			assert.NoError(c, admin.Status().Update(ctx, pod))
		}, timeout, tick)
	}
}

// convergeReady creates the Database, fakes its StatefulSet ready and waits
// for Ready=True.
func convergeReady(t *testing.T, db *dbv1.Database) *dbv1.Database {
	t.Helper()
	createDatabase(t, db)
	markStatefulSetReady(t, db)
	waitCondition(t, db, dbv1.ConditionReady, metav1.ConditionTrue, dbv1.ReasonReady)
	return getDatabase(t, db)
}

// reconcileCounts reads controller_runtime_reconcile_total by controller.
func reconcileCounts(t *testing.T) map[string]float64 {
	t.Helper()
	return countersByController(t, "controller_runtime_reconcile_total")
}

// reconcileErrors reads controller_runtime_reconcile_errors_total by
// controller.
func reconcileErrors(t *testing.T) map[string]float64 {
	t.Helper()
	return countersByController(t, "controller_runtime_reconcile_errors_total")
}

// countersByController sums a controller-runtime counter by its controller
// label, over every manager of the process.
func countersByController(t *testing.T, metric string) map[string]float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	counts := map[string]float64{}
	for _, f := range families {
		if f.GetName() != metric {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" {
					counts[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return counts
}

// annotate sets an annotation on the Database, which wakes every controller.
func annotate(t *testing.T, db *dbv1.Database, key, value string) {
	t.Helper()
	patchDatabase(t, db, func(d *dbv1.Database) {
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations[key] = value
	})
}
