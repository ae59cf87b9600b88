package validation_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestRatcheting: a Database stored before a rule existed (here: the cron
// shape of spec.backup.schedule, taken out of the CRD and put back) still
// accepts edits of other fields; changing the offending field to another
// invalid value is refused.
func TestRatcheting(t *testing.T) {
	ctx, ns := setup(t)
	// Without the rule, a Database with a bad schedule is stored.
	old := rawDatabase(ns, "legacy", map[string]any{"backup": map[string]any{"schedule": "every night"}})
	restore := storedWithout(ctx, t, old, func(spec *apiextensionsv1.JSONSchemaProps) {
		backup := spec.Properties["backup"]
		schedule := backup.Properties["schedule"]
		require.NotEmpty(t, schedule.XValidations, "the schedule rule moved; update this test")
		schedule.XValidations = nil
		backup.Properties["schedule"] = schedule
		spec.Properties["backup"] = backup
	})

	// The rule is back: new objects with the same value are refused again.
	restore()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := k8s.Create(ctx, rawDatabase(ns, "fresh", map[string]any{"backup": map[string]any{"schedule": "every night"}}), client.DryRunAll)
		if assert.Error(c, err) {
			assert.Contains(c, err.Error(), msgSchedule)
		}
	}, time.Minute, 100*time.Millisecond)

	// The stored one accepts an unrelated edit...
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(old.GroupVersionKind())
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(old), live))
	patch := client.MergeFrom(live.DeepCopy())
	require.NoError(t, unstructured.SetNestedField(live.Object, true, "spec", "paused"))
	require.NoError(t, k8s.Patch(ctx, live, patch), "ratcheting: an unrelated edit of a Database stored before the rule was refused")

	// ...but not another bad schedule.
	patch = client.MergeFrom(live.DeepCopy())
	require.NoError(t, unstructured.SetNestedField(live.Object, "still every night", "spec", "backup", "schedule"))
	err := k8s.Patch(ctx, live, patch)
	require.Error(t, err)
	assert.Contains(t, err.Error(), msgSchedule)
}

// TestEndOfLifeVersionKeepsRunning: a Database of PostgreSQL 14 stored
// before 14 reached its end of life (here: the rule refusing it taken out
// of the CRD and put back) still accepts every edit, while a new one of 14
// is refused naming the end of life.
func TestEndOfLifeVersionKeepsRunning(t *testing.T) {
	ctx, ns := setup(t)
	old := rawDatabase(ns, "legacy-14", map[string]any{"version": "14"})
	restore := storedWithout(ctx, t, old, func(spec *apiextensionsv1.JSONSchemaProps) {
		kept := spec.XValidations[:0]
		for _, r := range spec.XValidations {
			if !strings.Contains(r.Rule, "oldSelf.hasValue()") {
				kept = append(kept, r)
			}
		}
		require.Len(t, kept, len(spec.XValidations)-1, "the rule refusing 14 moved; update this test")
		spec.XValidations = kept
	})
	restore()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := k8s.Create(ctx, rawDatabase(ns, "fresh-14", map[string]any{"version": "14"}), client.DryRunAll)
		if assert.Error(c, err) {
			assert.Contains(c, err.Error(), msgVersionEOL)
		}
	}, time.Minute, 100*time.Millisecond, "a new Database of 14 was accepted")

	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(old.GroupVersionKind())
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(old), live))
	patch := client.MergeFrom(live.DeepCopy())
	require.NoError(t, unstructured.SetNestedField(live.Object, int64(3), "spec", "replicas"))
	require.NoError(t, unstructured.SetNestedField(live.Object, true, "spec", "paused"))
	require.NoError(t, k8s.Patch(ctx, live, patch), "an edit of an existing Database of 14 was refused")
	got, _, _ := unstructured.NestedString(live.Object, "spec", "version")
	assert.Equal(t, "14", got)
}

// storedWithout stores obj under a CRD whose spec schema mutate loosened,
// then returns the function that puts the original schema back (also run
// at the test's end). The CRD is shared by every test of the package:
// only loosen a rule no other test relies on being refused meanwhile.
func storedWithout(ctx context.Context, t *testing.T, obj *unstructured.Unstructured, mutate func(spec *apiextensionsv1.JSONSchemaProps)) func() {
	t.Helper()
	scheme := runtime.NewScheme()
	require.NoError(t, apiextensionsv1.AddToScheme(scheme))
	crdClient, err := client.New(k8sConfig, client.Options{Scheme: scheme})
	require.NoError(t, err)
	key := client.ObjectKey{Name: "databases.database.dbkeeper.io"}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	require.NoError(t, crdClient.Get(ctx, key, crd))
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	original := spec.DeepCopy()
	restore := func() {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			live := &apiextensionsv1.CustomResourceDefinition{}
			require.NoError(c, crdClient.Get(ctx, key, live))
			live.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = *original.DeepCopy()
			assert.NoError(c, crdClient.Update(ctx, live))
		}, time.Minute, 100*time.Millisecond)
	}
	t.Cleanup(restore)
	loose := *original.DeepCopy()
	mutate(&loose)
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = loose
	require.NoError(t, crdClient.Update(ctx, crd))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, k8s.Create(ctx, obj.DeepCopy()))
	}, time.Minute, 100*time.Millisecond, "the loosened CRD never accepted %s", obj.GetName())
	return restore
}
