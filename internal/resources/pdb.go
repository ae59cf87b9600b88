package resources

import (
	"k8s.io/apimachinery/pkg/util/intstr"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// PodDisruptionBudgetName is the name of the engine pods' budget.
func PodDisruptionBudgetName(db *dbv1.Database) string { return db.Name }

// WantsPodDisruptionBudget reports whether the Database runs enough
// instances for a budget: with one, a budget of maxUnavailable 1 protects
// nothing, and one of 0 would block every node drain for good.
func WantsPodDisruptionBudget(db *dbv1.Database) bool { return Instances(db) >= 2 }

// PodDisruptionBudget lets a voluntary disruption (a node drain) evict one
// engine pod at a time, so that a drain never takes the primary and a
// standby, or every standby behind the read-only Service, at once.
func PodDisruptionBudget(db *dbv1.Database) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	return policyv1ac.PodDisruptionBudget(PodDisruptionBudgetName(db), db.Namespace).
		WithLabels(Labels(db, ComponentDatabase)).
		WithOwnerReferences(OwnerReference(db)).
		WithSpec(policyv1ac.PodDisruptionBudgetSpec().
			WithMaxUnavailable(intstr.FromInt32(1)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(PodSelectorLabels(db))))
}
