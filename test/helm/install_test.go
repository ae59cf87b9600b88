package helm

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
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
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	require.NoError(t, c.Client.SubResource("token").Create(context.Background(), sa, tr))
	require.NotEmpty(t, tr.Status.Token)
	cfg := rest.AnonymousClientConfig(c.Config)
	cfg.BearerToken = tr.Status.Token
	cfg.WrapTransport = framework.RecordForbidden(forbidden)
	return cfg
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
// and is deleted with no request refused; then upgrades and uninstalls.
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
		op := operator.Start(t, cfg, operator.Options{})
		dbtest.CreateNamespace(t, admin, "apps")
		db := converge(t, admin, "apps", "orders")
		deleteDatabase(t, admin, db)
		op.Stop()
		assert.Empty(t, forbidden.All(), "requests refused to the cluster-wide release's ServiceAccount")
	})

	t.Run("namespaced", func(t *testing.T) {
		forbidden := &framework.Recorder{}
		cfg := serviceAccountConfig(t, c, "dbkeeper-team", "team-dbkeeper", forbidden)
		op := operator.Start(t, cfg, operator.Options{Namespaces: []string{"team-x"}})
		db := converge(t, admin, "team-x", "ledger")
		deleteDatabase(t, admin, db)
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
