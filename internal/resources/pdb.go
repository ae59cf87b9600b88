package resources

import (
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// PodDisruptionBudgetName is the name of the standbys' budget.
func PodDisruptionBudgetName(db *dbv1.Database) string { return db.Name }

// PrimaryDisruptionBudgetName is the name of the primary's budget.
func PrimaryDisruptionBudgetName(db *dbv1.Database) string { return db.Name + "-primary" }

// WantsPodDisruptionBudget reports whether the Database runs enough
// instances for its budgets: with one, a budget that refuses to evict the
// primary would block every node drain for good, and there is no standby
// to hand over to.
func WantsPodDisruptionBudget(db *dbv1.Database) bool { return Instances(db) >= 2 }

// PodDisruptionBudget lets a voluntary disruption (a node drain) evict one
// standby at a time, so that a drain never takes every standby behind the
// read-only Service, or the synchronous one and its successor, at once.
// It is minAvailable (standbys - 1), not maxUnavailable 1: the disruption
// controller counts a maxUnavailable budget against the StatefulSet's
// whole scale, primary included, so one of 1 over the standbys would
// allow no eviction at all.
func PodDisruptionBudget(db *dbv1.Database) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	sel := PodSelectorLabels(db)
	sel[dbv1.LabelRole] = dbv1.RoleReplica
	return disruptionBudget(db, PodDisruptionBudgetName(db), policyv1ac.PodDisruptionBudgetSpec().
		WithMinAvailable(intstr.FromInt32(max(0, Instances(db)-2))).
		WithSelector(metav1ac.LabelSelector().WithMatchLabels(sel)))
}

// PrimaryDisruptionBudget refuses every eviction of a healthy pod that is
// or may be the primary: every engine pod not labelled replica, so the
// primary, and the pods whose role label the replication controller took
// off while a switchover or failover is in doubt (a budget selecting the
// primary label alone selects nothing then, and a drain evicted the
// primary in the middle of its own switchover). A drain of the primary's
// node waits, retrying, while the replication controller sees the node
// cordoned and switches over to a standby on another node; the former
// primary, then labelled replica, is evicted under the standbys' budget.
// maxUnavailable 0: the disruption controller counts it against the
// StatefulSet's scale, so no selected pod may go. A pod that is not Ready
// can be evicted (nothing is served that a failover would not restore).
// Each pod is selected by one budget only: the eviction API refuses pods
// with two.
func PrimaryDisruptionBudget(db *dbv1.Database) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	return disruptionBudget(db, PrimaryDisruptionBudgetName(db), policyv1ac.PodDisruptionBudgetSpec().
		WithMaxUnavailable(intstr.FromInt32(0)).
		WithSelector(metav1ac.LabelSelector().
			WithMatchLabels(PodSelectorLabels(db)).
			WithMatchExpressions(metav1ac.LabelSelectorRequirement().
				WithKey(dbv1.LabelRole).WithOperator(metav1.LabelSelectorOpNotIn).WithValues(dbv1.RoleReplica))))
}

// disruptionBudget is the engine pods' budget name with spec, which
// always lets unhealthy pods go: a crash-looping pod must not block a
// drain.
func disruptionBudget(db *dbv1.Database, name string, spec *policyv1ac.PodDisruptionBudgetSpecApplyConfiguration) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	return policyv1ac.PodDisruptionBudget(name, db.Namespace).
		WithLabels(Labels(db, ComponentDatabase)).
		WithOwnerReferences(OwnerReference(db)).
		WithSpec(spec.WithUnhealthyPodEvictionPolicy(policyv1.AlwaysAllow))
}
