package facet

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
)

// Writer is how one controller writes with server-side apply, with its own
// field manager: its children (Apply), its condition and other status
// fields (ApplyCondition, ApplyStatus), and the Events of what it does
// (Eventf). Every apply goes through an apply.Writer, which sends only the
// applies that could change something.
type Writer struct {
	applier  *apply.Writer
	recorder events.EventRecorder
}

// NewWriter is the Writer of the named controller, with the manager's
// client and an event recorder of the controller's field owner.
func NewWriter(mgr ctrl.Manager, controllerName string) *Writer {
	return WriterFor(mgr.GetClient(), mgr.GetEventRecorder(FieldOwner(controllerName)), controllerName)
}

// WriterFor is the Writer of the named controller from plain dependencies:
// the client it applies with and the recorder of its Events, which must not
// be nil (tests use an events.FakeRecorder).
func WriterFor(c client.Client, recorder events.EventRecorder, controllerName string) *Writer {
	return &Writer{applier: apply.NewWriter(c, FieldOwner(controllerName)), recorder: recorder}
}

// Apply applies desired, a child of a Database, over live (nil when there
// is none) unless that could change nothing, and reports whether the child
// changed.
func (w *Writer) Apply(ctx context.Context, live client.Object, desired runtime.ApplyConfiguration) (bool, error) {
	return w.applier.Apply(ctx, live, desired)
}

// ApplyCondition writes cond, stamped with the Database's generation,
// together with the controller's other status fields in extra (which may be
// nil); see conditions.Status. It writes nothing when the controller's last
// write of the same status still stands, and records an Event when the
// condition's status changes. A Database that is gone is no error.
func (w *Writer) ApplyCondition(ctx context.Context, db *dbv1.Database, cond metav1.Condition, extra *dbv1ac.DatabaseStatusApplyConfiguration) error {
	desired, cond, transitioned := conditions.Status(db, cond, extra, time.Now())
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues(
		"condition", cond.Type, "status", cond.Status, "reason", cond.Reason, "message", cond.Message))
	changed, err := w.applier.ApplyStatus(ctx, db, desired)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("applying condition %s: %w", cond.Type, err)
	}
	if changed && transitioned {
		w.recorder.Eventf(db, nil, conditions.EventType(cond), cond.Reason, "Reconcile", "%s is %s: %s", cond.Type, cond.Status, cond.Message)
	}
	return nil
}

// ApplyStatus writes the controller's status fields in status, for a
// controller that has no condition to report with them, unless its last
// write of the same fields still stands. A Database that is gone is no
// error.
func (w *Writer) ApplyStatus(ctx context.Context, db *dbv1.Database, status *dbv1ac.DatabaseStatusApplyConfiguration) error {
	_, err := w.applier.ApplyStatus(ctx, db, dbv1ac.Database(db.Name, db.Namespace).WithStatus(status))
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Eventf records an Event regarding the Database (or another object), as
// events.EventRecorder does.
func (w *Writer) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	w.recorder.Eventf(regarding, related, eventtype, reason, action, note, args...)
}
