package statefulset

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// enginePods lists the Database's engine pods from the cache, by the labels
// of the StatefulSet's selector.
func (s *syncer) enginePods(ctx context.Context, db *dbv1.Database) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	sel := labels.SelectorFromSet(resources.PodSelectorLabels(db))
	if err := s.client.List(ctx, pods, client.InNamespace(db.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("listing engine pods: %w", err)
	}
	return pods.Items, nil
}

// podStatusChanged lets through the pod events that can change what
// diagnose says: a pod created or deleted, or a change of its status (the
// containers' states, restarts, readiness, scheduling). Label and
// annotation changes do not wake the controller.
func podStatusChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		oldPod, okOld := e.ObjectOld.(*corev1.Pod)
		newPod, okNew := e.ObjectNew.(*corev1.Pod)
		if !okOld || !okNew {
			return true
		}
		return !equality.Semantic.DeepEqual(oldPod.Status, newPod.Status) ||
			!oldPod.DeletionTimestamp.Equal(newPod.DeletionTimestamp)
	}}
}

// podReady reports whether the pod's Ready condition is True.
func podReady(pod *corev1.Pod) bool {
	c := podCondition(pod, corev1.PodReady)
	return c != nil && c.Status == corev1.ConditionTrue
}

// podCondition is the pod's condition of type t, or nil.
func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}
