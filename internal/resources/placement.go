package resources

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// defaultSpreadKeys are the node labels the engine pods spread over when
// spec.topologySpreadConstraints is unset: nodes first, then zones.
var defaultSpreadKeys = []string{corev1.LabelHostname, corev1.LabelTopologyZone}

// affinity is spec.affinity, or by default a preferred anti-affinity of
// the Database's pods on kubernetes.io/hostname: the scheduler spreads
// the instances over nodes when it can, and still places them all on one
// node when there is only one. It stays beside the default spread
// constraints (topologySpread) because the scheduler scores a pod's own
// spread constraints only on nodes that carry all of their topology keys:
// where nodes have no zone label, the anti-affinity alone spreads the
// instances over nodes.
func affinity(db *dbv1.Database) *corev1ac.AffinityApplyConfiguration {
	if db.Spec.Affinity != nil {
		return ViaJSON[corev1ac.AffinityApplyConfiguration](db.Spec.Affinity)
	}
	return corev1ac.Affinity().WithPodAntiAffinity(corev1ac.PodAntiAffinity().
		WithPreferredDuringSchedulingIgnoredDuringExecution(corev1ac.WeightedPodAffinityTerm().
			WithWeight(100).
			WithPodAffinityTerm(corev1ac.PodAffinityTerm().
				WithTopologyKey(corev1.LabelHostname).
				WithLabelSelector(metav1ac.LabelSelector().WithMatchLabels(PodSelectorLabels(db))))))
}

// topologySpread is the engine pods' topology spread constraints:
// spec.topologySpreadConstraints when it is set, an empty list included
// (no constraint at all), with the Database's pod selector filled in
// where a constraint has no labelSelector (one without would count no
// pod); unset, one soft constraint per defaultSpreadKeys.
//
// The default is maxSkew 1 and ScheduleAnyway, so that a single node or
// zone still runs every instance, over the pods of the Database's
// selector and no matchLabelKeys: a rollout replaces the instances one by
// one, and the old revision's pods must count with the new one's, or a
// restarted instance could land beside one that has not restarted yet.
//
// Two constraints of one topologyKey and whenUnsatisfiable are an error:
// the pod template keys its constraints by that pair, and the API server
// would refuse the StatefulSet's apply with an error that names no field.
// Admission cannot refuse them (the comparison is beyond a CRD's CEL
// budget), so it is said here, naming the Database's field.
func topologySpread(db *dbv1.Database) ([]*corev1ac.TopologySpreadConstraintApplyConfiguration, error) {
	if set := db.Spec.TopologySpreadConstraints; set != nil {
		type pair struct {
			key  string
			when corev1.UnsatisfiableConstraintAction
		}
		seen := make(map[pair]bool, len(*set))
		out := make([]*corev1ac.TopologySpreadConstraintApplyConfiguration, 0, len(*set))
		for i := range *set {
			c := &(*set)[i]
			p := pair{c.TopologyKey, c.WhenUnsatisfiable}
			if seen[p] {
				return nil, fmt.Errorf("spec.topologySpreadConstraints: two constraints have topologyKey %q and whenUnsatisfiable %s, which a pod refuses: merge them into one",
					c.TopologyKey, c.WhenUnsatisfiable)
			}
			seen[p] = true
			ac := ViaJSON[corev1ac.TopologySpreadConstraintApplyConfiguration](c)
			if ac.LabelSelector == nil {
				ac.WithLabelSelector(metav1ac.LabelSelector().WithMatchLabels(PodSelectorLabels(db)))
			}
			out = append(out, ac)
		}
		return out, nil
	}
	out := make([]*corev1ac.TopologySpreadConstraintApplyConfiguration, 0, len(defaultSpreadKeys))
	for _, key := range defaultSpreadKeys {
		out = append(out, corev1ac.TopologySpreadConstraint().
			WithMaxSkew(1).
			WithTopologyKey(key).
			WithWhenUnsatisfiable(corev1.ScheduleAnyway).
			WithLabelSelector(metav1ac.LabelSelector().WithMatchLabels(PodSelectorLabels(db))))
	}
	return out, nil
}

// tolerations is spec.tolerations as apply configurations.
func tolerations(db *dbv1.Database) []*corev1ac.TolerationApplyConfiguration {
	out := make([]*corev1ac.TolerationApplyConfiguration, 0, len(db.Spec.Tolerations))
	for i := range db.Spec.Tolerations {
		out = append(out, ViaJSON[corev1ac.TolerationApplyConfiguration](&db.Spec.Tolerations[i]))
	}
	return out
}
