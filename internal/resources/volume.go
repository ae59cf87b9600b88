package resources

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
)

// KeepLargerRequest keeps the storage request of a live claim that is larger
// than desired's: a claim cannot shrink (the apply would be Invalid, for
// good), and a volume grown by hand, or re-created larger from a manifest,
// holds what it holds. A smaller live claim is left to grow. live may be nil.
func KeepLargerRequest(desired *corev1ac.PersistentVolumeClaimApplyConfiguration, live *corev1.PersistentVolumeClaim) {
	if live == nil || desired.Spec == nil || desired.Spec.Resources == nil || desired.Spec.Resources.Requests == nil {
		return
	}
	have, ok := live.Spec.Resources.Requests[corev1.ResourceStorage]
	want := (*desired.Spec.Resources.Requests)[corev1.ResourceStorage]
	if !ok || have.Cmp(want) <= 0 {
		return
	}
	requests := maps.Clone(*desired.Spec.Resources.Requests)
	requests[corev1.ResourceStorage] = have
	desired.Spec.Resources.Requests = &requests
}
