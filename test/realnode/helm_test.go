package realnode

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
)

// TestHelmInstalledOperator: the operator installed with the Helm chart runs
// in the cluster as a pod of its locally built image, with the chart's
// RBAC, probes and metrics Service, and brings a Database to a working
// connection.
func TestHelmInstalledOperator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	system, apps := newNamespace(t), newNamespace(t)
	root, err := envtest.RepoRoot()
	require.NoError(t, err)
	repo, tag, ok := strings.Cut(local.Images["manager"], ":")
	require.True(t, ok, "manager image ref %q has a tag", local.Images["manager"])
	overrides, err := json.Marshal(map[string]string{"postgres:15": local.Images["postgres:15"], "postgres:17": local.Images["postgres:17"]})
	require.NoError(t, err)

	helm := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(local.Bin, "helm"), append(args, "--kubeconfig="+local.Kubeconfig)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		require.NoError(t, cmd.Run(), "helm %s:\n%s", strings.Join(args, " "), out.String())
		return out.String()
	}
	helm("install", "dbkeeper", filepath.Join(root, "config", "charts", "dbkeeper"), "--namespace="+system,
		"--wait", "--timeout=3m",
		"--set=image.repository="+repo, "--set=image.tag="+tag, "--set=image.pullPolicy=Never",
		"--set-json=engineImages.overrides="+string(overrides),
		"--set=watchNamespaces={"+apps+"}",
		"--set=crds.enabled=false") // the cluster installed the CRD
	t.Cleanup(func() { helm("uninstall", "dbkeeper", "--namespace="+system, "--wait") })

	deployments := &appsv1.DeploymentList{}
	require.NoError(t, k8s.List(ctx, deployments, client.InNamespace(system)))
	require.Len(t, deployments.Items, 1)
	d := deployments.Items[0]
	assert.Equal(t, int32(1), d.Status.AvailableReplicas, "the manager pod passed its probes")
	assert.Equal(t, local.Images["manager"], d.Spec.Template.Spec.Containers[0].Image)

	db := newDatabase(apps, "helm", "17")
	create(t, db)
	waitReady(t, db)
	fillItems(t, generated(db))

	// the metrics Service serves the manager's metrics to a pod
	out, err := psql.Run(ctx, apps, nil, `exec 3<>/dev/tcp/$1/8080 && printf 'GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n' >&3 && cat <&3`,
		[]string{"dbkeeper-metrics." + system + ".svc"}, queryTimeout)
	require.NoError(t, err)
	assert.Contains(t, out, `controller_runtime_reconcile_total{controller="readiness"`, "the manager's metrics")
}
