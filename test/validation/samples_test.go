package validation_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
)

// TestSamplesAreAccepted creates every sample of config/samples (dry run), so
// the examples users copy from are never invalid.
func TestSamplesAreAccepted(t *testing.T) {
	ctx, ns := setup(t)
	root, err := envtest.RepoRoot()
	require.NoError(t, err)
	files, err := filepath.Glob(filepath.Join(root, "config", "samples", "*.yaml"))
	require.NoError(t, err)
	seen := 0
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		obj := &unstructured.Unstructured{}
		require.NoError(t, yaml.Unmarshal(data, &obj.Object), f)
		obj.SetNamespace(ns)
		assert.NoError(t, k8s.Create(ctx, obj, client.DryRunAll), "sample %s", filepath.Base(f))
		seen++
	}
	assert.Positive(t, seen, "no samples in config/samples")
}
