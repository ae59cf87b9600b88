// Package conditions builds one facet's condition and the status request
// that carries it (facet.Writer applies it with the facet's own field
// manager), and derives the Ready summary.
package conditions

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// Status is the status apply request of one controller: cond, stamped with
// the Database's generation, together with the controller's other status
// fields in extra (which may be nil). cond keeps the lastTransitionTime the
// Database holds when its status did not change, and takes now, to the
// second, when it did; Status returns cond as stamped and whether it
// transitioned. extra is not changed.
func Status(db *dbv1.Database, cond metav1.Condition, extra *dbv1ac.DatabaseStatusApplyConfiguration, now time.Time) (*dbv1ac.DatabaseApplyConfiguration, metav1.Condition, bool) {
	cond.ObservedGeneration = db.Generation
	previous := meta.FindStatusCondition(db.Status.Conditions, cond.Type)
	transitioned := previous == nil || previous.Status != cond.Status
	if transitioned {
		cond.LastTransitionTime = metav1.NewTime(now.Truncate(time.Second))
	} else {
		cond.LastTransitionTime = previous.LastTransitionTime
	}

	// a copy: extra is the caller's, and may be written again with the
	// condition (a second call must not carry it twice)
	status := dbv1ac.DatabaseStatus()
	if extra != nil {
		c := *extra
		c.Conditions = slices.Clone(extra.Conditions)
		status = &c
	}
	status.WithConditions(metav1ac.Condition().
		WithType(cond.Type).
		WithStatus(cond.Status).
		WithReason(cond.Reason).
		WithMessage(cond.Message).
		WithObservedGeneration(cond.ObservedGeneration).
		WithLastTransitionTime(cond.LastTransitionTime))
	return dbv1ac.Database(db.Name, db.Namespace).WithStatus(status), cond, transitioned
}

// EventType is the type of the Event of a transition to cond: Warning for
// a condition that went False, except for the steps of a rollout (reason
// Progressing): those are normal; and for a True condition that still asks
// the user to act (ReplicasCapped).
func EventType(cond metav1.Condition) string {
	switch {
	case cond.Status == metav1.ConditionFalse && cond.Reason != dbv1.ReasonProgressing,
		cond.Reason == dbv1.ReasonReplicasCapped:
		return corev1.EventTypeWarning
	}
	return corev1.EventTypeNormal
}

// True, False and Unknown build a condition of the given type.
func True(condType, reason, message string) metav1.Condition {
	return metav1.Condition{Type: condType, Status: metav1.ConditionTrue, Reason: reason, Message: message}
}

// False builds a condition with status False.
func False(condType, reason, message string) metav1.Condition {
	return metav1.Condition{Type: condType, Status: metav1.ConditionFalse, Reason: reason, Message: message}
}

// Unknown builds a condition with status Unknown.
func Unknown(condType, reason, message string) metav1.Condition {
	return metav1.Condition{Type: condType, Status: metav1.ConditionUnknown, Reason: reason, Message: message}
}

// Quote is text from elsewhere (the kubelet, a container's termination
// message) fit for a condition's message: on one line, its runs of white
// space made single spaces, at most n runes, with the cut marked.
func Quote(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
