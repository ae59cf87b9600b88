package resources

import (
	policyv1 "k8s.io/api/policy/v1"
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
	return disruptionBudget(db, PodDisruptionBudgetName(db), dbv1.RoleReplica,
		policyv1ac.PodDisruptionBudgetSpec().WithMinAvailable(intstr.FromInt32(max(0, Instances(db)-2))))
}

// PrimaryDisruptionBudget refuses every eviction of the healthy primary:
// a drain of its node waits, retrying, while the replication controller
// sees the node cordoned and switches over to a standby on another node;
// the former primary, then a standby, is evicted under the standbys'
// budget. A primary that is not Ready can be evicted (nothing is served
// that a failover would not restore). Each pod is selected by one budget
// only, by its role label: the eviction API refuses pods with two.
func PrimaryDisruptionBudget(db *dbv1.Database) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	return disruptionBudget(db, PrimaryDisruptionBudgetName(db), dbv1.RolePrimary,
		policyv1ac.PodDisruptionBudgetSpec().WithMinAvailable(intstr.FromInt32(1)))
}

// disruptionBudget is the budget name of the engine pods of one role,
// with spec's limit. It always lets unhealthy pods go: a crashing standby
// must not block a drain.
func disruptionBudget(db *dbv1.Database, name, role string, spec *policyv1ac.PodDisruptionBudgetSpecApplyConfiguration) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	sel := PodSelectorLabels(db)
	sel[dbv1.LabelRole] = role
	return policyv1ac.PodDisruptionBudget(name, db.Namespace).
		WithLabels(Labels(db, ComponentDatabase)).
		WithOwnerReferences(OwnerReference(db)).
		WithSpec(spec.
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(sel)).
			WithUnhealthyPodEvictionPolicy(policyv1.AlwaysAllow))
}
