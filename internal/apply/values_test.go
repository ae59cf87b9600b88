package apply

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"
)

func liveStatefulSet() *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", ResourceVersion: "7",
			Labels: map[string]string{"a": "1", "other": "x"}},
		Spec: appsv1.StatefulSetSpec{
			Replicas:             ptr.To[int32](3),
			RevisionHistoryLimit: ptr.To[int32](10),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "engine", Image: "pg:17", TerminationMessagePath: "/dev/termination-log"}},
			}},
		},
		Status: appsv1.StatefulSetStatus{Replicas: 3},
	}
}

func desiredStatefulSet(replicas int32, image string) *appsv1ac.StatefulSetApplyConfiguration {
	return appsv1ac.StatefulSet("db", "ns").
		WithLabels(map[string]string{"a": "1"}).
		WithSpec(appsv1ac.StatefulSetSpec().
			WithReplicas(replicas).
			WithTemplate(corev1ac.PodTemplateSpec().WithSpec(corev1ac.PodSpec().
				WithContainers(corev1ac.Container().WithName("engine").WithImage(image).
					WithResources(corev1ac.ResourceRequirements())))))
}

// keeps is keepsValues of desired as a Writer encodes it.
func keeps(t *testing.T, live, desired any) bool {
	t.Helper()
	body, err := json.Marshal(desired)
	require.NoError(t, err)
	kept, err := keepsValues(live, body)
	require.NoError(t, err)
	return kept
}

func TestKeepsValues(t *testing.T) {
	tests := []struct {
		name    string
		desired *appsv1ac.StatefulSetApplyConfiguration
		want    bool
	}{
		{"same fields, live has defaults and more", desiredStatefulSet(3, "pg:17"), true},
		{"scalar differs", desiredStatefulSet(1, "pg:17"), false},
		{"nested list element differs", desiredStatefulSet(3, "pg:16"), false},
		{"label missing in live", desiredStatefulSet(3, "pg:17").WithLabels(map[string]string{"new": "y"}), false},
		{"list length differs", desiredStatefulSet(3, "pg:17").WithSpec(appsv1ac.StatefulSetSpec().WithReplicas(3).
			WithTemplate(corev1ac.PodTemplateSpec().WithSpec(corev1ac.PodSpec().WithContainers(
				corev1ac.Container().WithName("engine").WithImage("pg:17"),
				corev1ac.Container().WithName("sidecar"))))), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, keeps(t, liveStatefulSet(), tt.desired))
		})
	}
}

// Each controller applies only its own condition; the entries of the others
// in the same list are not a difference.
func TestKeepsValuesMatchesConditionsByType(t *testing.T) {
	live := map[string]any{"status": map[string]any{"conditions": []any{
		map[string]any{"type": "A", "status": "True", "reason": "Ok"},
		map[string]any{"type": "B", "status": "False", "reason": "Broken"},
	}}}
	mine := func(status, reason string) map[string]any {
		return map[string]any{"status": map[string]any{"conditions": []any{
			map[string]any{"type": "B", "status": status, "reason": reason},
		}}}
	}
	assert.True(t, keeps(t, live, mine("False", "Broken")), "own entry unchanged among others")
	assert.False(t, keeps(t, live, mine("True", "Fixed")), "own entry changed")
	assert.False(t, keeps(t, live, map[string]any{"status": map[string]any{"conditions": []any{map[string]any{"type": "C"}}}}), "own entry missing")

	// Only a list named conditions is keyed: elsewhere a list with more
	// elements in live is a difference.
	other := map[string]any{"spec": map[string]any{"items": []any{
		map[string]any{"type": "A"}, map[string]any{"type": "B"},
	}}}
	assert.False(t, keeps(t, other, map[string]any{"spec": map[string]any{"items": []any{map[string]any{"type": "B"}}}}))
}

// A zero that desired sets is what live's JSON omits: not a difference, or a
// controller reporting replicas: 0 would write its status on every reconcile.
// Map entries keep their empty values, so an empty label still counts.
func TestKeepsValuesZeroValues(t *testing.T) {
	live := func(replicas int32) *appsv1.StatefulSet {
		sts := liveStatefulSet()
		sts.Status = appsv1.StatefulSetStatus{Replicas: replicas}
		return sts
	}
	zero := appsv1ac.StatefulSet("db", "ns").WithStatus(appsv1ac.StatefulSetStatus().
		WithReplicas(0).WithReadyReplicas(0).WithObservedGeneration(0).WithCurrentRevision(""))
	tests := []struct {
		name    string
		live    *appsv1.StatefulSet
		desired *appsv1ac.StatefulSetApplyConfiguration
		want    bool
	}{
		{"zeros that live omits", live(0), zero, true},
		{"zero where live holds a value", live(2), zero, false},
		{"value where live omits the zero", live(0), appsv1ac.StatefulSet("db", "ns").
			WithStatus(appsv1ac.StatefulSetStatus().WithReplicas(1)), false},
		{"empty label value is a label", live(0), appsv1ac.StatefulSet("db", "ns").
			WithLabels(map[string]string{"flag": ""}), false},
		{"empty label value held", func() *appsv1.StatefulSet {
			sts := live(0)
			sts.Labels["flag"] = ""
			return sts
		}(), appsv1ac.StatefulSet("db", "ns").WithLabels(map[string]string{"flag": ""}), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, keeps(t, tt.live, tt.desired))
		})
	}
}
