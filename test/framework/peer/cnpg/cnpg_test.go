package cnpg

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// manifest is a release manifest cut down to what Objects changes.
const manifest = `apiVersion: v1
kind: Namespace
metadata:
  name: cnpg-system
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: cnpg-controller-manager
  namespace: cnpg-system
spec:
  template:
    spec:
      containers:
      - name: manager
        env:
        - name: OPERATOR_IMAGE_NAME
          value: ghcr.io/cloudnative-pg/cloudnative-pg:1.30.0
        image: ghcr.io/cloudnative-pg/cloudnative-pg:1.30.0
        imagePullPolicy: Always
        resources:
          limits:
            cpu: 100m
            memory: 200Mi
          requests:
            cpu: 100m
            memory: 100Mi
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: clusters.postgresql.cnpg.io
spec:
  versions:
  - name: v1
    schema:
      openAPIV3Schema:
        properties:
          spec:
            properties:
              imagePullPolicy:
                type: string
---
`

// TestObjects: the upstream image is replaced wherever named, nothing is
// pulled, and the operator's limits go unless kept.
func TestObjects(t *testing.T) {
	objs, err := Objects([]byte(manifest), "localhost/dbkeeper/cloudnative-pg:x", false)
	require.NoError(t, err)
	require.Len(t, objs, 3, "the empty last document is no object")
	versions, _, _ := unstructured.NestedSlice(objs[2].Object, "spec", "versions")
	schemaProp, _, _ := unstructured.NestedMap(versions[0].(map[string]any),
		"schema", "openAPIV3Schema", "properties", "spec", "properties", "imagePullPolicy")
	assert.Equal(t, map[string]any{"type": "string"}, schemaProp,
		"a CRD's schema property named imagePullPolicy is no container field (the API server refused the CRD)")
	assert.Equal(t, "Namespace", objs[0].GetKind())
	containers, _, err := unstructured.NestedSlice(objs[1].Object, "spec", "template", "spec", "containers")
	require.NoError(t, err)
	c := containers[0].(map[string]any)
	assert.Equal(t, "localhost/dbkeeper/cloudnative-pg:x", c["image"])
	assert.Equal(t, "IfNotPresent", c["imagePullPolicy"])
	assert.Equal(t, "localhost/dbkeeper/cloudnative-pg:x", c["env"].([]any)[0].(map[string]any)["value"],
		"OPERATOR_IMAGE_NAME: the instance pods' bootstrap container")
	assert.Equal(t, map[string]any{"requests": map[string]any{"cpu": "100m", "memory": "100Mi"}}, c["resources"])

	objs, err = Objects([]byte(manifest), "ref", true)
	require.NoError(t, err)
	containers, _, _ = unstructured.NestedSlice(objs[1].Object, "spec", "template", "spec", "containers")
	assert.Contains(t, containers[0].(map[string]any)["resources"], "limits", "KeepLimits keeps them")

	_, err = Objects([]byte("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n"), "ref", false)
	assert.ErrorContains(t, err, "never names")
}

// TestClusterObject: the spec of the comparison's Cluster.
func TestClusterObject(t *testing.T) {
	u := ClusterObject(ClusterOptions{Namespace: "ns", Name: "pg", Instances: 3, ImageName: "localhost/dbkeeper/postgres:17",
		StorageClass: "sized", Size: "768Mi", Synchronous: true})
	assert.Equal(t, ClusterGVK, u.GroupVersionKind())
	assert.Equal(t, "ns", u.GetNamespace())
	spec := u.Object["spec"].(map[string]any)
	assert.Equal(t, int64(3), spec["instances"])
	assert.Equal(t, int64(999), spec["postgresUID"])
	assert.Equal(t, int64(999), spec["postgresGID"])
	assert.Equal(t, int64(0), spec["failoverDelay"])
	assert.Equal(t, "IfNotPresent", spec["imagePullPolicy"])
	assert.Equal(t, map[string]any{"method": "any", "number": int64(1), "dataDurability": "required"},
		spec["postgresql"].(map[string]any)["synchronous"])
	// what the API server gets must be valid JSON-able unstructured
	assert.NotPanics(t, func() { u.DeepCopy() })

	spec = ClusterObject(ClusterOptions{Instances: 1}).Object["spec"].(map[string]any)
	assert.NotContains(t, spec, "postgresql", "asynchronous")
}

// TestHealthy: a settled Cluster, and each reason one is not.
func TestHealthy(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{
		"phase": PhaseHealthy, "instances": int64(3), "readyInstances": int64(3),
		"currentPrimary": "pg-2", "targetPrimary": "pg-2", "timelineID": int64(2),
		"instancesReportedState": map[string]any{
			"pg-1": map[string]any{"isPrimary": false, "timeLineID": int64(2), "ip": "10.0.0.1"},
			"pg-2": map[string]any{"isPrimary": true, "timeLineID": int64(2)},
			"pg-3": map[string]any{"isPrimary": false, "timeLineID": int64(2)},
		},
		"conditions": []any{map[string]any{"type": "Ready", "status": "True", "reason": "ClusterIsReady",
			"message": "Cluster is Ready", "lastTransitionTime": "2026-12-06T10:00:00Z"}},
	}}}
	s, err := parseStatus(u)
	require.NoError(t, err)
	assert.Equal(t, "pg-2", s.CurrentPrimary)
	assert.NoError(t, s.Healthy(3))
	assert.ErrorContains(t, s.Healthy(4), "3 of 4 instances ready")

	failing := s
	failing.TargetPrimary = "pg-1"
	assert.ErrorContains(t, failing.Healthy(3), `current primary "pg-2", target "pg-1"`)
	failing = s
	failing.InstancesReportedState = map[string]ReportedState{"pg-1": {TimeLineID: 1}, "pg-2": {IsPrimary: true, TimeLineID: 2}, "pg-3": {TimeLineID: 1}}
	assert.NoError(t, failing.Healthy(3), "standbys report the timeline of their last checkpoint: after a failover the old one until a restartpoint "+
		"(a Cluster whose standbys streamed was not healthy for 7 minutes)")
	failing.InstancesReportedState = map[string]ReportedState{"pg-1": {IsPrimary: true}, "pg-2": {IsPrimary: true}, "pg-3": {}}
	assert.ErrorContains(t, failing.Healthy(3), "primaries [pg-1 pg-2]")
	failing = s
	failing.Phase, failing.Conditions = "Failing over", nil
	assert.ErrorContains(t, failing.Healthy(3), `phase "Failing over"`)
	assert.ErrorContains(t, failing.Healthy(3), "condition Ready")
}

// TestWriteLayer: CloudNativePG's image layout, the same bytes every
// time.
func TestWriteLayer(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "manager")
	require.NoError(t, os.WriteFile(bin, []byte("binary"), 0o755))
	layer := filepath.Join(dir, "layer.tar")
	require.NoError(t, writeLayer(bin, layer))
	f, err := os.Open(layer)
	require.NoError(t, err)
	defer f.Close()
	tr := tar.NewReader(f)
	got := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		got[h.Name] = h
		if h.Name == "./operator/manager_amd64" {
			data, err := io.ReadAll(tr)
			require.NoError(t, err)
			assert.Equal(t, "binary", string(data))
		}
	}
	require.Contains(t, got, "./operator/manager_amd64")
	assert.Equal(t, int64(0o755), got["./operator/manager_amd64"].Mode)
	assert.Equal(t, 0, got["./operator/manager_amd64"].Uid)
	require.Contains(t, got, "./manager")
	assert.Equal(t, byte(tar.TypeSymlink), got["./manager"].Typeflag)
	assert.Equal(t, "operator/manager_amd64", got["./manager"].Linkname)

	first, err := os.ReadFile(layer)
	require.NoError(t, err)
	require.NoError(t, writeLayer(bin, layer))
	again, err := os.ReadFile(layer)
	require.NoError(t, err)
	assert.Equal(t, first, again, "reproducible")
}

// TestCached: the image's names carry the key, under the cache directory.
func TestCached(t *testing.T) {
	img := cached("/c")
	key := cacheKey()
	assert.Len(t, key, 12)
	assert.Equal(t, "localhost/dbkeeper/cloudnative-pg:1.30.0-"+key, img.Ref)
	assert.Equal(t, "/c/operator-1.30.0-"+key+".tar", img.Tarball)
	assert.Equal(t, "/c/cnpg-1.30.0.yaml", img.Manifest)
	t.Setenv("XDG_CACHE_HOME", "/x")
	dir, err := CacheDir()
	require.NoError(t, err)
	assert.Equal(t, "/x/dbkeeper/cnpg", dir)
}

// TestResultsMarkdown: a row per fault, p50 and max per operator, and
// what went wrong.
func TestResultsMarkdown(t *testing.T) {
	r := NewResults([]string{"dbkeeper", "CloudNativePG"}, []string{"pod-deleted", "cut"})
	for _, d := range []time.Duration{9 * time.Second, 7 * time.Second, 8 * time.Second, 12 * time.Second} {
		r.Add("dbkeeper", "pod-deleted", d)
	}
	r.Add("CloudNativePG", "pod-deleted", 31*time.Second)
	r.Failed("CloudNativePG", "pod-deleted")
	r.Lost("CloudNativePG", "pod-deleted", 3)
	r.NotRun("dbkeeper", "cut", 2)
	assert.Equal(t, []time.Duration{9 * time.Second, 7 * time.Second, 8 * time.Second, 12 * time.Second}, r.Measured("dbkeeper", "pod-deleted"))
	got := r.Markdown(func(f string) string {
		if f == "cut" {
			return "cut (longest write gap)"
		}
		return ""
	})
	assert.Equal(t, `| fault | dbkeeper p50 / max | CloudNativePG p50 / max |
|---|---|---|
| pod-deleted | 8.0 s / 12.0 s (4 runs) | 31.0 s / 31.0 s (1 run, 1 failed, 3 acknowledged writes lost) |
| cut (longest write gap) | – (0 runs, 2 not run) | – (0 runs) |
`, got)
	assert.Panics(t, func() { r.Add("nobody", "pod-deleted", time.Second) })
}
