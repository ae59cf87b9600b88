package conditions

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// Summary derives the Ready condition from the conditions of the enabled
// facets, in the given order:
//   - while the Database is being deleted, Ready is False with reason Deleting;
//   - a facet that is False at the current generation makes Ready False with
//     that facet's reason (the first such facet's);
//   - otherwise a facet that is missing, Unknown, or behind the current
//     generation makes Ready Unknown (reason Paused when paused, else
//     Reconciling);
//   - otherwise Ready is True.
func Summary(db *dbv1.Database, facets []string) metav1.Condition {
	if !db.DeletionTimestamp.IsZero() {
		msg := "the Database is being deleted"
		if d := meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionDeleting); d != nil && d.Message != "" {
			msg = d.Message
		}
		return False(dbv1.ConditionReady, dbv1.ReasonDeleting, msg)
	}
	var falseReason string
	var failing, waiting []string
	for _, t := range facets {
		c := meta.FindStatusCondition(db.Status.Conditions, t)
		switch {
		case c == nil || c.ObservedGeneration < db.Generation:
			waiting = append(waiting, t)
		case c.Status == metav1.ConditionFalse:
			if falseReason == "" {
				falseReason = c.Reason
			}
			failing = append(failing, fmt.Sprintf("%s: %s", t, c.Message))
		case c.Status == metav1.ConditionUnknown:
			waiting = append(waiting, t)
		}
	}
	switch {
	case len(failing) > 0:
		return False(dbv1.ConditionReady, falseReason, strings.Join(failing, "; "))
	case len(waiting) > 0 && db.Spec.Paused:
		return Unknown(dbv1.ConditionReady, dbv1.ReasonPaused, "spec.paused is true: dbkeeper leaves the children as they are")
	case len(waiting) > 0:
		return Unknown(dbv1.ConditionReady, dbv1.ReasonReconciling, "waiting for "+strings.Join(waiting, ", "))
	}
	return True(dbv1.ConditionReady, dbv1.ReasonReady, "every facet is ready")
}

// Observed reports whether every enabled facet has reported on the current
// generation, which is when status.observedGeneration may move to it.
func Observed(db *dbv1.Database, facets []string) bool {
	for _, t := range facets {
		c := meta.FindStatusCondition(db.Status.Conditions, t)
		if c == nil || c.ObservedGeneration < db.Generation {
			return false
		}
	}
	return true
}

// Phase is the one-word summary of a Ready condition for humans.
func Phase(ready metav1.Condition) dbv1.Phase {
	switch {
	case ready.Reason == dbv1.ReasonDeleting:
		return dbv1.PhaseDeleting
	case ready.Status == metav1.ConditionTrue:
		return dbv1.PhaseReady
	case ready.Reason == dbv1.ReasonPaused:
		return dbv1.PhasePaused
	case ready.Status == metav1.ConditionUnknown, ready.Reason == dbv1.ReasonProgressing:
		return dbv1.PhaseProgressing
	}
	return dbv1.PhaseDegraded
}
