package realnode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/test/framework"
	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
)

// TestHelmInstalledOperator: the operator installed with the Helm chart runs
// in the cluster as a pod of its locally built image, with the chart's
// RBAC, probes and secure metrics Service, and brings a Database to a
// working connection.
func TestHelmInstalledOperator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	system, apps := newNamespace(t), newNamespace(t)
	helmInstall(t, system, apps)

	deployments := &appsv1.DeploymentList{}
	require.NoError(t, k8s.List(ctx, deployments, client.InNamespace(system)))
	require.Len(t, deployments.Items, 1)
	d := deployments.Items[0]
	assert.Equal(t, int32(2), d.Status.AvailableReplicas, "both manager pods (the chart's default) passed their probes")
	assert.Equal(t, local.Images["manager"], d.Spec.Template.Spec.Containers[0].Image)
	// One of the two leads: it holds the leader-election Lease.
	pods := &corev1.PodList{}
	require.NoError(t, k8s.List(ctx, pods, client.InNamespace(system), client.MatchingLabels(d.Spec.Selector.MatchLabels)))
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	assert.Contains(t, names, leaderOf(t, system), "a manager pod leads")

	db := newDatabase(apps, "helm", "17")
	create(t, db)
	waitReady(t, db)
	fillItems(t, generated(db))

	// the metrics Service is reachable from a pod by its DNS name...
	out, err := psql.Run(ctx, apps, nil, `exec 3<>/dev/tcp/$1/8443 && echo open`,
		[]string{"dbkeeper-metrics." + system + ".svc"}, queryTimeout)
	require.NoError(t, err)
	assert.Contains(t, out, "open", "the metrics Service from a pod")

	// ...and serves HTTPS to authorized callers only. No pod of the
	// cluster's images has a TLS client, and the API server's service proxy
	// drops the caller's Authorization header, so the test process asks the
	// Service's ClusterIP itself (the host routes the Service range through
	// the node's bridge and kube-proxy, as the API server does for webhooks).
	assertSecureMetricsService(t, system, apps, "dbkeeper-"+system+"-metrics-reader")
}

// helmInstall installs the chart as release dbkeeper in namespace system,
// with the locally built manager and engine images, watching namespace
// apps, and waits until its Deployment is available (its defaults: two
// replicas, leader election); the release is uninstalled after the test.
func helmInstall(t *testing.T, system, apps string, set ...string) {
	t.Helper()
	root, err := envtest.RepoRoot()
	require.NoError(t, err)
	repo, tag, ok := strings.Cut(local.Images["manager"], ":")
	require.True(t, ok, "manager image ref %q has a tag", local.Images["manager"])
	overrides, err := json.Marshal(local.EngineImageMap())
	require.NoError(t, err)
	helm(t, append([]string{"install", "dbkeeper", filepath.Join(root, "config", "charts", "dbkeeper"), "--namespace=" + system,
		"--wait", "--timeout=3m",
		// --set-string: a content tag of only digits (420744954915) is
		// otherwise a number, which the chart's schema refuses.
		"--set=image.repository=" + repo, "--set-string=image.tag=" + tag, "--set=image.pullPolicy=Never",
		"--set-json=engineImages.overrides=" + string(overrides),
		"--set=watchNamespaces={" + apps + "}",
		"--set=crds.enabled=false"}, // the cluster installed the CRD
		set...)...)
	t.Cleanup(func() { helm(t, "uninstall", "dbkeeper", "--namespace="+system, "--wait") })
	// before the uninstall (cleanups run last first): a failed test keeps
	// the managers' logs, as an in-process operator's
	t.Cleanup(func() {
		if t.Failed() {
			saveManagerLogs(t, system, "the test failed")
		}
	})
}

// helm runs the cluster's helm with args and returns what it printed.
func helm(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(local.Bin, "helm"), append(args, "--kubeconfig="+local.Kubeconfig)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Run(), "helm %s:\n%s", strings.Join(args, " "), out.String())
	return out.String()
}

// helmUpgrade upgrades helmInstall's release in namespace system to the
// manager image ref, keeping every other value, and waits until its
// Deployment is available again.
func helmUpgrade(t *testing.T, system, ref string) {
	t.Helper()
	root, err := envtest.RepoRoot()
	require.NoError(t, err)
	repo, tag, ok := strings.Cut(ref, ":")
	require.True(t, ok, "manager image ref %q has a tag", ref)
	helm(t, "upgrade", "dbkeeper", filepath.Join(root, "config", "charts", "dbkeeper"), "--namespace="+system,
		"--reuse-values", "--wait", "--timeout=3m",
		"--set=image.repository="+repo, "--set-string=image.tag="+tag)
}

// saveManagerLogs writes the logs of every manager pod of the release in
// namespace system (their previous containers' too) to a file under the
// temporary directory that outlives the test, and says where and why.
func saveManagerLogs(t *testing.T, system, why string) {
	t.Helper()
	ctx := context.Background()
	pods := &corev1.PodList{}
	if err := k8s.List(ctx, pods, client.InNamespace(system), client.MatchingLabels{"app.kubernetes.io/name": "dbkeeper"}); err != nil {
		t.Logf("the managers' logs: listing their pods: %v", err)
		return
	}
	f, err := os.CreateTemp("", "dbkeeper-operator-log-"+system+"-*.log")
	if err != nil {
		t.Logf("the managers' logs: %v", err)
		return
	}
	defer f.Close()
	for _, p := range pods.Items {
		for _, previous := range []bool{true, false} {
			logs, err := psql.Clientset.CoreV1().Pods(system).GetLogs(p.Name, &corev1.PodLogOptions{Previous: previous, Timestamps: true}).DoRaw(ctx)
			if previous && err != nil {
				continue // no previous container
			}
			fmt.Fprintf(f, "=== %s on %s (previous container: %t)\n", p.Name, p.Spec.NodeName, previous)
			if err != nil {
				fmt.Fprintf(f, "reading its log: %v\n", err)
			}
			_, _ = f.Write(logs)
		}
	}
	t.Logf("the managers' logs (%s) are in %s", why, f.Name())
}

// leaderOf is the manager pod that holds the leader-election Lease of the
// release in namespace system.
func leaderOf(t *testing.T, system string) string {
	t.Helper()
	election := &coordinationv1.Lease{}
	require.Eventually(t, func() bool {
		return k8s.Get(context.Background(), client.ObjectKey{Namespace: system, Name: "dbkeeper"}, election) == nil &&
			election.Spec.HolderIdentity != nil
	}, timeout, time.Second, "the leader-election Lease %s/dbkeeper", system)
	holder, _, _ := strings.Cut(*election.Spec.HolderIdentity, "_")
	return holder
}

// assertSecureMetricsService checks the chart's secure metrics Service in
// namespace: no token is 401, the token of a ServiceAccount of apps not
// bound to the release's metrics-reader ClusterRole is 403, and one bound
// to it reads the controllers' metrics.
func assertSecureMetricsService(t *testing.T, namespace, apps, readerRole string) {
	t.Helper()
	ctx := context.Background()
	svc := &corev1.Service{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "dbkeeper-metrics"}, svc))
	require.Len(t, svc.Spec.Ports, 1)
	assert.Equal(t, "https", svc.Spec.Ports[0].Name)
	addr := net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(svc.Spec.Ports[0].Port)))

	for _, name := range []string{"scraper", "stranger"} {
		create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: apps, Name: name}})
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: readerRole + "-scraper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: readerRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: apps, Name: "scraper"}},
	}
	create(t, binding)
	t.Cleanup(func() { assert.NoError(t, client.IgnoreNotFound(k8s.Delete(context.Background(), binding))) })
	token := func(name string) string {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: apps, Name: name}}
		tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
		require.NoError(t, k8s.SubResource("token").Create(ctx, sa, tr))
		require.NotEmpty(t, tr.Status.Token)
		return tr.Status.Token
	}
	scraper, stranger := token("scraper"), token("stranger")

	var code int
	var body string
	require.Eventually(t, func() bool { code, body = framework.GetMetrics(addr, ""); return code != 0 }, timeout, time.Second,
		"the metrics Service %s did not answer: %s", addr, body)
	assert.Equal(t, http.StatusUnauthorized, code, "no token: %s", body)
	code, body = framework.GetMetrics(addr, stranger)
	assert.Equal(t, http.StatusForbidden, code, "a token not bound to %s: %s", readerRole, body)
	// The manager caches a denial for 30s: a binding that reached the
	// authorizer a moment late is seen within the wait. The Service
	// balances over both replicas, and only the leader runs the
	// controllers: the scrape is repeated until it reached the leader.
	assert.Eventually(t, func() bool {
		code, body = framework.GetMetrics(addr, scraper)
		return code == http.StatusOK && strings.Contains(body, `controller_runtime_reconcile_total{controller="readiness"`)
	}, timeout, time.Second, "a token bound to %s reads the leader's controller metrics: %d %s", readerRole, code, body)
}
