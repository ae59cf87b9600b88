package helm

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/test/framework"
	"github.com/dbkeeper/dbkeeper/test/framework/cluster"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
	"github.com/dbkeeper/dbkeeper/test/framework/operator"
)

const (
	timeout = 90 * time.Second
	tick    = 100 * time.Millisecond
)

// serviceAccountConfig is a client configuration that authenticates as the
// ServiceAccount with a token from the TokenRequest API, as the manager's
// pod would, with every 403 counted.
func serviceAccountConfig(t *testing.T, c *cluster.Cluster, namespace, name string, forbidden *framework.Recorder) *rest.Config {
	t.Helper()
	cfg := rest.AnonymousClientConfig(c.Config)
	cfg.BearerToken = serviceAccountToken(t, c.Client, namespace, name)
	cfg.WrapTransport = framework.RecordForbidden(forbidden)
	return cfg
}

// serviceAccountToken is a token of the ServiceAccount from the
// TokenRequest API.
func serviceAccountToken(t *testing.T, admin client.Client, namespace, name string) string {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	require.NoError(t, admin.SubResource("token").Create(context.Background(), sa, tr))
	require.NotEmpty(t, tr.Status.Token)
	return tr.Status.Token
}

// freeAddress is a loopback address with a port nobody listens on.
func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// assertSecureMetrics checks the operator's secure /metrics at addr, which
// runs with a release's ServiceAccount and so with the chart's metrics-auth
// ClusterRole: no token is 401, the token of an account not bound to the
// release's metrics-reader ClusterRole is 403, and one bound to it reads
// the controllers' metrics.
func assertSecureMetrics(t *testing.T, admin client.Client, addr, namespace, readerRole string) {
	t.Helper()
	ctx := context.Background()
	for _, name := range []string{"scraper", "stranger"} {
		require.NoError(t, admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}))
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: readerRole + "-scraper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: readerRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: "scraper"}},
	}
	require.NoError(t, admin.Create(ctx, binding))
	scraper := serviceAccountToken(t, admin, namespace, "scraper")
	stranger := serviceAccountToken(t, admin, namespace, "stranger")

	var code int
	var body string
	require.Eventually(t, func() bool { code, body = framework.GetMetrics(addr, ""); return code != 0 }, timeout, tick,
		"the secure metrics endpoint did not answer: %s", body)
	assert.Equal(t, http.StatusUnauthorized, code, "no token: %s", body)
	code, body = framework.GetMetrics(addr, stranger)
	assert.Equal(t, http.StatusForbidden, code, "a token not bound to %s: %s", readerRole, body)
	// A new binding reaches the API server's authorizer in a moment; a
	// denial is cached by the manager for 30s, so the wait is generous.
	assert.Eventually(t, func() bool { code, body = framework.GetMetrics(addr, scraper); return code == http.StatusOK }, timeout, time.Second,
		"a token bound to %s: %d %s", readerRole, code, body)
	assert.Contains(t, body, "controller_runtime_reconcile_total", "the controllers' metrics")
}

func helmInstall(t *testing.T, c *cluster.Cluster, verb, release, namespace string, args ...string) {
	t.Helper()
	_, chart, _ := paths(t)
	base := []string{verb, release, chart, "--kubeconfig=" + c.Kubeconfig, "--namespace=" + namespace, "--wait", "--timeout=2m"}
	if verb == "install" {
		base = append(base, "--create-namespace")
	}
	out, err := helm(t, append(base, args...)...)
	require.NoError(t, err, "helm %s %s:\n%s", verb, release, out)
}

// converge creates a Database as the admin, waits for Ready, and returns it.
func converge(t *testing.T, c client.Client, namespace, name string, mutate ...func(*dbv1.Database)) *dbv1.Database {
	t.Helper()
	db := dbtest.New(namespace, name, mutate...)
	require.NoError(t, c.Create(context.Background(), db))
	dbtest.WaitCondition(t, c, db, dbv1.ConditionReady, metav1.ConditionTrue, dbv1.ReasonReady, timeout)
	return db
}

// deleteDatabase deletes the Database and waits until it is gone.
func deleteDatabase(t *testing.T, c client.Client, db *dbv1.Database) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, c.Delete(ctx, db))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(db), &dbv1.Database{}))
	}, timeout, tick, "the Database was not deleted")
}

// TestInstallAndRunAsTheChartsServiceAccount installs the chart twice (a
// cluster-wide and a namespaced release side by side), runs the operator
// with each release's ServiceAccount token, and checks a Database converges
// and is deleted with no request refused, and that its secure /metrics
// answers only a token bound to the release's metrics-reader ClusterRole;
// then upgrades and uninstalls.
func TestInstallAndRunAsTheChartsServiceAccount(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cluster; skipped under -short")
	}
	ctrl.SetLogger(logr.Discard())
	ctx := context.Background()
	c, err := cluster.Start(ctx, cluster.Options{WithoutCRDs: true})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Stop()) })
	admin := c.Client

	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	crd.SetName("databases.database.dbkeeper.io")

	helmInstall(t, c, "install", "dbkeeper", "dbkeeper-system")
	dbtest.CreateNamespace(t, admin, "team-x")
	helmInstall(t, c, "install", "team", "dbkeeper-team", "--set", "watchNamespaces={team-x}", "--set", "crds.enabled=false")

	t.Run("cluster-wide", func(t *testing.T) {
		forbidden := &framework.Recorder{}
		cfg := serviceAccountConfig(t, c, "dbkeeper-system", "dbkeeper", forbidden)
		metrics := freeAddress(t)
		op := operator.Start(t, cfg, operator.Options{MetricsBindAddress: metrics, MetricsSecure: true, SkipTLSServerProbe: true})
		dbtest.CreateNamespace(t, admin, "apps")
		db := converge(t, admin, "apps", "orders")
		deleteDatabase(t, admin, db)
		assertSecureMetrics(t, admin, metrics, "apps", "dbkeeper-dbkeeper-system-metrics-reader")
		op.Stop()
		assert.Empty(t, forbidden.All(), "requests refused to the cluster-wide release's ServiceAccount")
	})

	t.Run("namespaced", func(t *testing.T) {
		forbidden := &framework.Recorder{}
		cfg := serviceAccountConfig(t, c, "dbkeeper-team", "team-dbkeeper", forbidden)
		metrics := freeAddress(t)
		op := operator.Start(t, cfg, operator.Options{Namespaces: []string{"team-x"}, MetricsBindAddress: metrics, MetricsSecure: true, SkipTLSServerProbe: true})
		db := converge(t, admin, "team-x", "ledger")
		deleteDatabase(t, admin, db)
		assertSecureMetrics(t, admin, metrics, "team-x", "team-dbkeeper-dbkeeper-team-metrics-reader")
		op.Stop()
		assert.Empty(t, forbidden.All(), "requests refused to the namespaced release's ServiceAccount")

		// The namespaced account sees nothing outside its namespaces.
		sa, err := client.New(cfg, client.Options{Scheme: admin.Scheme()})
		require.NoError(t, err)
		err = sa.List(ctx, &dbv1.DatabaseList{}, client.InNamespace("apps"))
		assert.True(t, apierrors.IsForbidden(err), "listing Databases outside the watched namespaces: %v", err)
	})

	t.Run("deletion protection", func(t *testing.T) {
		db := &dbv1.Database{
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "precious"},
			Spec:       dbv1.DatabaseSpec{Engine: dbv1.EnginePostgres, Version: "17", DeletionPolicy: dbv1.DeletionPolicyDoNotDelete},
		}
		require.NoError(t, admin.Create(ctx, db))
		err := admin.Delete(ctx, db)
		require.Error(t, err, "a DoNotDelete Database was deleted")
		assert.Contains(t, err.Error(), "has spec.deletionPolicy DoNotDelete: change it to Delete, Retain or WipeOut before deleting it")
	})

	t.Run("upgrade", func(t *testing.T) {
		helmInstall(t, c, "upgrade", "dbkeeper", "dbkeeper-system", "--set", "controllers.backup.enabled=false", "--set", "maxConcurrentReconciles=4")
		d := &appsv1.Deployment{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: "dbkeeper-system", Name: "dbkeeper"}, d))
		args := strings.Join(d.Spec.Template.Spec.Containers[0].Args, " ")
		assert.Contains(t, args, "--controllers=*,-backup")
		assert.Contains(t, args, "--max-concurrent-reconciles=4")
		assert.Contains(t, args, "--metrics-secure", "the chart's default")
	})

	t.Run("uninstall keeps the CRD and the Databases", func(t *testing.T) {
		out, err := helm(t, "uninstall", "dbkeeper", "--kubeconfig="+c.Kubeconfig, "--namespace=dbkeeper-system", "--wait")
		require.NoError(t, err, out)
		assert.Contains(t, out, "kept due to the resource policy")
		require.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(crd), crd), "the CRD went with the release")
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: "apps", Name: "precious"}, &dbv1.Database{}), "a Database went with the release")
		err = admin.Get(ctx, client.ObjectKey{Namespace: "dbkeeper-system", Name: "dbkeeper"}, &appsv1.Deployment{})
		assert.True(t, apierrors.IsNotFound(err), "the Deployment is still there: %v", err)
	})
}
