// Package realnode runs dbkeeper against the local cluster's real node
// (test/framework/realnode): a kubelet, containerd and runc run
// the PostgreSQL images built by images/build.sh, CoreDNS and kube-proxy
// route clients to them. Every test asserts a database fact (rows written
// through the client Service are there after the pod, the operator or the
// Database went away; a dump restores), not only that objects exist.
//
// It needs root and the real node's packages (.ci/run installs them); where
// they are missing the suite says why and skips, unless
// DBKEEPER_REQUIRE_REAL_NODE=1 (CI) makes that a failure.
package realnode

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework"
	"github.com/dbkeeper/dbkeeper/test/framework/cluster"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
	"github.com/dbkeeper/dbkeeper/test/framework/operator"
	"github.com/dbkeeper/dbkeeper/test/framework/realnode"
)

const (
	// timeout bounds each wait for a real server: its first start (initdb)
	// takes 5–15 s on the 2-core machine, a restore some more.
	timeout = 3 * time.Minute
	// queryTimeout bounds one client pod.
	queryTimeout = 90 * time.Second
)

var (
	// realNodes is how many real nodes the suite's cluster runs: one, or
	// three for the node faults (nodefaults_test.go, build tag nodes).
	realNodes = 1
	// realImages are the images built and imported into each node (keys
	// of images/build.sh); all when nil.
	realImages []string
	// theNode is the cluster's real node(s), for the node faults.
	theNode *realnode.Node
	local   *cluster.Cluster
	k8s     client.Client
	psql    dbtest.Client
	images  engine.Catalog
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipping the real-node suite under -short: it starts a cluster with a kubelet")
		return
	}
	theNode = realnode.New(realnode.Options{LockWait: 20 * time.Minute, Nodes: realNodes, Images: realImages})
	cluster.RunTestsWith(m, "realnode", cluster.Options{Node: theNode}, func(c *cluster.Cluster) {
		local, k8s = c, c.Client
		var err error
		if images, err = engine.NewCatalog("", c.EngineImages()); err != nil {
			fmt.Fprintf(os.Stderr, "realnode: the cluster's engine images: %v\n", err)
			os.Exit(1)
		}
		psql = dbtest.Client{Client: c.Client, Clientset: kubernetes.NewForConfigOrDie(c.Config), Image: c.Images["postgres:17"]}
		if s3, s3Endpoint, err = startObjectStore(c, "s3"); err != nil {
			fmt.Fprintf(os.Stderr, "realnode: the object store: %v\n", err)
			os.Exit(1)
		}
	})
}

// newNamespace creates a namespace for one test, and deletes it with all
// it holds when the test ends, so a finished test leaves no PostgreSQL
// running beside the next ones (a CI run failed on a node loaded with ~25
// finished Databases). The deletion runs after the test's operator stopped
// (cleanups run last registered first), so the Databases' finalizers are
// dropped first; DBKEEPER_KEEP_CLUSTER=1 keeps a failed test's namespace.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := dbtest.NewNamespace(t, k8s, "real-")
	t.Cleanup(func() {
		if t.Failed() {
			keepPodLogs(t, ns)
		}
		if t.Failed() && os.Getenv("DBKEEPER_KEEP_CLUSTER") == "1" {
			return
		}
		if err := dropNamespace(context.Background(), ns); err != nil {
			t.Logf("namespace %s stays: %v", ns, err)
		}
	})
	return ns
}

// keepPodLogs writes the logs of every container of the pods of
// namespace, and of their previous runs, into a directory it names, for a
// failure seen once in CI to be read whole afterwards (the cluster is gone
// by then).
func keepPodLogs(t *testing.T, namespace string) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "dbkeeper-pod-logs-"+namespace+"-")
	if err != nil {
		t.Logf("keeping the pods' logs: %v", err)
		return
	}
	pods := &corev1.PodList{}
	if err := k8s.List(ctx, pods, client.InNamespace(namespace)); err != nil {
		t.Logf("keeping the pods' logs: %v", err)
		return
	}
	for _, p := range pods.Items {
		for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			for _, previous := range []bool{false, true} {
				raw, err := psql.Clientset.CoreV1().Pods(namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, Previous: previous}).DoRaw(ctx)
				if err != nil || len(raw) == 0 {
					continue
				}
				name := fmt.Sprintf("%s-%s.log", p.Name, c.Name)
				if previous {
					name = fmt.Sprintf("%s-%s-previous.log", p.Name, c.Name)
				}
				_ = os.WriteFile(filepath.Join(dir, name), raw, 0o600)
			}
		}
	}
	t.Logf("the logs of the pods of namespace %s are in %s", namespace, dir)
}

// dropNamespace deletes namespace without waiting for it to go: the
// finalizers of its Databases first (no operator is left to remove them),
// then the namespace, whose pods the kubelet stops in the background.
func dropNamespace(ctx context.Context, namespace string) error {
	dbs := &dbv1.DatabaseList{}
	if err := k8s.List(ctx, dbs, client.InNamespace(namespace)); err != nil {
		return fmt.Errorf("listing Databases: %w", err)
	}
	for i := range dbs.Items {
		db := &dbs.Items[i]
		if len(db.Finalizers) == 0 {
			continue
		}
		patch := client.MergeFrom(db.DeepCopy())
		db.Finalizers = nil
		if err := k8s.Patch(ctx, db, patch); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("dropping the finalizers of Database %s: %w", db.Name, err)
		}
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if err := k8s.Delete(ctx, ns, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting the namespace: %w", err)
	}
	return nil
}

// startOperator runs an operator with every controller on namespace, with
// the cluster's engine images; its log is printed when the test fails.
func startOperator(t *testing.T, namespaces ...string) *operator.Operator {
	t.Helper()
	return operator.Start(t, local.Config, operatorOptions(t, namespaces...))
}

// instanceMetrics is held by the test whose operator scrapes the instances'
// metrics: every manager of the process serves controller-runtime's one
// registry, where each registers its store of the instances' series, and
// two running stores would both serve the unlabelled
// dbkeeper_instance_scrape_round_duration_seconds, which fails the whole
// /metrics of both (a store empties itself when its manager stops).
var instanceMetrics sync.Mutex

// startOperatorWithMetrics is startOperator serving /metrics over plain HTTP
// on a loopback port, with the instances' series scraped every 2 s, once no
// other test's operator does (instanceMetrics); it returns the metrics' URL.
func startOperatorWithMetrics(t *testing.T, namespaces ...string) string {
	t.Helper()
	instanceMetrics.Lock()
	t.Cleanup(instanceMetrics.Unlock) // after the operator stopped: cleanups run last registered first
	port, err := framework.FreePort()
	require.NoError(t, err)
	o := operatorOptions(t, namespaces...)
	o.MetricsBindAddress = "127.0.0.1:" + strconv.Itoa(port)
	o.InstanceMetricsInterval = 2 * time.Second
	operator.Start(t, local.Config, o)
	return "http://" + o.MetricsBindAddress + "/metrics"
}

// operatorOptions are startOperator's options, for a test that changes some.
func operatorOptions(t *testing.T, namespaces ...string) operator.Options {
	return operator.Options{
		Namespaces: namespaces,
		Engines:    images,
		Logger:     operator.FileLogger(t, 40),
		// Real PostgreSQL on the node: the operator reaches the pods'
		// IPs on the host's bridge.
		RealInstances: true,
		AgentImage:    local.ManagerImage(),
	}
}

// newDatabase is a Database of version whose scheduled backup never runs
// during a test.
func newDatabase(namespace, name, version string, mutate ...func(*dbv1.Database)) *dbv1.Database {
	return dbtest.New(namespace, name, append([]func(*dbv1.Database){func(d *dbv1.Database) {
		d.Spec.Version = version
		d.Spec.Backup.Schedule = "0 0 1 1 *"
	}}, mutate...)...)
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	require.NoError(t, k8s.Create(context.Background(), obj))
}

func waitCondition(t *testing.T, db *dbv1.Database, condType string, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	return dbtest.WaitCondition(t, k8s, db, condType, status, reason, timeout)
}

func waitReady(t *testing.T, db *dbv1.Database) *dbv1.Database {
	t.Helper()
	waitCondition(t, db, dbv1.ConditionReady, metav1.ConditionTrue, dbv1.ReasonReady)
	return dbtest.Get(t, k8s, db)
}

// generated is the connection an application gets from the generated
// Secret alone: its uri, which names the client Service by DNS.
func generated(db *dbv1.Database) dbtest.Conn {
	return dbtest.Conn{Namespace: db.Namespace, Secret: resources.GeneratedSecretName(db)}
}

// query runs sql against conn and fails the test on an error.
func query(t *testing.T, conn dbtest.Conn, sql string) string {
	t.Helper()
	out, err := psql.Query(context.Background(), conn, sql, queryTimeout)
	require.NoError(t, err, "query %q", sql)
	return out
}

// queryEventually retries sql until it succeeds or the timeout passes: a
// pod is Ready only once pg_isready answers, but kube-proxy may route to
// the old endpoint for a moment after a restart.
func queryEventually(t *testing.T, conn dbtest.Conn, sql string) string {
	t.Helper()
	var out string
	var err error
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if out, err = psql.Query(context.Background(), conn, sql, queryTimeout); err == nil {
			return out
		}
		time.Sleep(2 * time.Second)
	}
	require.NoError(t, err, "query %q", sql)
	return out
}

// secretValue reads one key of a Secret.
func secretValue(t *testing.T, namespace, name, key string) string {
	t.Helper()
	sec := &corev1.Secret{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, sec))
	return string(sec.Data[key])
}
