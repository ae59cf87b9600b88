package helm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/dbkeeper/dbkeeper/test/framework/manifests"
)

// kustomize is manifests.Kustomize by "Kind namespace/name".
func kustomize(t *testing.T, image string) map[string]*unstructured.Unstructured {
	t.Helper()
	list, err := manifests.Kustomize(image)
	require.NoError(t, err)
	objs := map[string]*unstructured.Unstructured{}
	for _, u := range list {
		objs[u.GetKind()+" "+u.GetNamespace()+"/"+u.GetName()] = u
	}
	return objs
}

// TestKustomizeInstall (issue 29): the kustomize install gives the manager
// the --agent-image it requires (before, it had none and the manager exited
// at start), equal to the image set for the manager, and the namespace and
// labels by which the Databases' NetworkPolicies admit it.
func TestKustomizeInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs kubectl kustomize; skipped under -short")
	}
	objs := kustomize(t, "registry.example.com/dbkeeper:1.2.3")
	d := objs["Deployment dbkeeper-system/dbkeeper-manager"]
	require.NotNil(t, d, "no Deployment dbkeeper-manager in %v", keys(objs))
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	require.Len(t, containers, 1)
	c := containers[0].(map[string]any)
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	assert.Equal(t, "registry.example.com/dbkeeper:1.2.3", c["image"])
	assert.Contains(t, args, "--agent-image=registry.example.com/dbkeeper:1.2.3", "the manager's own image")
	env, _, _ := unstructured.NestedSlice(c, "env")
	assert.Contains(t, env, map[string]any{"name": "POD_NAMESPACE", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.namespace"}}},
		"--manager-namespace's default")
	podLabels, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
	assert.Equal(t, "dbkeeper", podLabels["app.kubernetes.io/name"], "--manager-pod-labels' default")
	assert.Equal(t, "manager", podLabels["app.kubernetes.io/component"], "--manager-pod-labels' default")
	assert.NotNil(t, objs["ClusterRole /dbkeeper-manager"], "the manager's ClusterRole")
}
