package helm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// kustomize renders the kustomize install (config/default) with the
// manager image set to image, as its comment says to (kustomize edit set
// image, here by rewriting the images entry), and returns the objects by
// "Kind namespace/name".
func kustomize(t *testing.T, image string) map[string]*unstructured.Unstructured {
	t.Helper()
	root, _, helmBin := paths(t)
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(filepath.Join(dir, "config"), os.DirFS(filepath.Join(root, "config"))))
	name, tag, _ := strings.Cut(image, ":")
	k := filepath.Join(dir, "config", "default", "kustomization.yaml")
	data, err := os.ReadFile(k)
	require.NoError(t, err)
	set := strings.Replace(string(data), "newName: ghcr.io/dbkeeper/dbkeeper\n    newTag: dev", "newName: "+name+"\n    newTag: "+tag, 1)
	require.NotEqual(t, string(data), set, "the images entry of config/default")
	require.NoError(t, os.WriteFile(k, []byte(set), 0o644))
	out, err := exec.Command(filepath.Join(filepath.Dir(helmBin), "kubectl"), "kustomize", filepath.Join(dir, "config", "default")).CombinedOutput()
	require.NoError(t, err, "kubectl kustomize: %s", out)
	objs := map[string]*unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(out)), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		if u.GetKind() != "" {
			objs[u.GetKind()+" "+u.GetNamespace()+"/"+u.GetName()] = u
		}
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
