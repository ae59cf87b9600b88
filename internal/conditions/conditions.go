// Package conditions writes one facet's condition into a Database's status
// with that facet's own field manager, and derives the Ready summary.
package conditions

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
)

// Writer applies the status fields of one controller. Each controller has its
// own Writer, whose Owner is its field manager, so that server-side apply
// keeps every controller's condition apart from the others'.
type Writer struct {
	Client   client.Client
	Recorder events.EventRecorder
	// Owner is the field manager, dbkeeper-<controller>.
	Owner string
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// Sent, when set, keeps a reconcile that reads a cache not yet holding
	// this Writer's last apply from sending it again; nil remembers nothing.
	Sent *apply.Sent
}

// Apply writes cond, stamped with the Database's generation, together with
// the controller's other status fields in extra (which may be nil). It keeps
// lastTransitionTime when the condition's status did not change, writes
// nothing when the status already holds all of it, and records an Event when
// the condition's status changes.
func (w Writer) Apply(ctx context.Context, db *dbv1.Database, cond metav1.Condition, extra *dbv1ac.DatabaseStatusApplyConfiguration) error {
	cond.ObservedGeneration = db.Generation
	previous := meta.FindStatusCondition(db.Status.Conditions, cond.Type)
	transitioned := previous == nil || previous.Status != cond.Status
	if transitioned {
		cond.LastTransitionTime = metav1.NewTime(w.now().Truncate(time.Second))
	} else {
		cond.LastTransitionTime = previous.LastTransitionTime
	}

	status := extra
	if status == nil {
		status = dbv1ac.DatabaseStatus()
	}
	status.WithConditions(metav1ac.Condition().
		WithType(cond.Type).
		WithStatus(cond.Status).
		WithReason(cond.Reason).
		WithMessage(cond.Message).
		WithObservedGeneration(cond.ObservedGeneration).
		WithLastTransitionTime(cond.LastTransitionTime))
	desired := dbv1ac.Database(db.Name, db.Namespace).WithStatus(status)

	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues(
		"condition", cond.Type, "status", cond.Status, "reason", cond.Reason, "message", cond.Message))
	wrote, err := w.Sent.ApplyStatus(ctx, w.Client, db, desired, w.Owner)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("applying condition %s: %w", cond.Type, err)
	}
	if wrote && transitioned && w.Recorder != nil {
		w.Recorder.Eventf(db, nil, eventType(cond), cond.Reason, "Reconcile", "%s is %s: %s", cond.Type, cond.Status, cond.Message)
	}
	return nil
}

func (w Writer) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

// eventType is Warning for a condition that went False, except for the
// steps of a rollout (reason Progressing): those are normal; and for a True
// condition that still asks the user to act (ReplicasCapped).
func eventType(cond metav1.Condition) string {
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
