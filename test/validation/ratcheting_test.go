package validation_test

import (
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
	scheme := runtime.NewScheme()
	require.NoError(t, apiextensionsv1.AddToScheme(scheme))
	crdClient, err := client.New(k8sConfig, client.Options{Scheme: scheme})
	require.NoError(t, err)

	crd := &apiextensionsv1.CustomResourceDefinition{}
	key := client.ObjectKey{Name: "databases.database.dbkeeper.io"}
	schedule := func(c *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.JSONSchemaProps {
		spec := c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		backup := spec.Properties["backup"]
		s := backup.Properties["schedule"]
		return &s
	}
	setSchedule := func(c *apiextensionsv1.CustomResourceDefinition, s apiextensionsv1.JSONSchemaProps) {
		spec := c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		backup := spec.Properties["backup"]
		backup.Properties["schedule"] = s
		spec.Properties["backup"] = backup
		c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
	}
	require.NoError(t, crdClient.Get(ctx, key, crd))
	original := *schedule(crd).DeepCopy()
	require.NotEmpty(t, original.XValidations, "the schedule rule moved; update this test")
	restore := func() {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			live := &apiextensionsv1.CustomResourceDefinition{}
			require.NoError(c, crdClient.Get(ctx, key, live))
			setSchedule(live, original)
			assert.NoError(c, crdClient.Update(ctx, live))
		}, time.Minute, 100*time.Millisecond)
	}
	t.Cleanup(restore)

	// Without the rule, a Database with a bad schedule is stored.
	loose := *original.DeepCopy()
	loose.XValidations = nil
	setSchedule(crd, loose)
	require.NoError(t, crdClient.Update(ctx, crd))
	old := rawDatabase(ns, "legacy", map[string]any{"backup": map[string]any{"schedule": "every night"}})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, k8s.Create(ctx, old.DeepCopy()))
	}, time.Minute, 100*time.Millisecond, "the loosened CRD never accepted the old Database")

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
	err = k8s.Patch(ctx, live, patch)
	require.Error(t, err)
	assert.Contains(t, err.Error(), msgSchedule)
}
