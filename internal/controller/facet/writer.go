package facet

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// Writer is how one controller writes with server-side apply, with its own
// field manager: its children (Apply), its condition and other status
// fields (ApplyCondition, ApplyStatus), and the Events of what it does
// (Eventf). Every apply goes through an apply.Writer, which sends only the
// applies that could change something.
type Writer struct {
	applier *apply.Writer
	// unguarded applies without the owner check (see WhileDeleting).
	unguarded *apply.Writer
	recorder  events.EventRecorder
}

// ErrOwnerDeleted is the error of an apply that was not sent because the
// child names as owner a Database that is being deleted or is gone.
var ErrOwnerDeleted = errors.New("its Database is being deleted or is gone")

// NewWriter is the Writer of the named controller, with the manager's
// client, its API reader for the owner check (see Apply), and an event
// recorder of the controller's field owner.
func NewWriter(mgr ctrl.Manager, controllerName string) *Writer {
	return writer(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder(FieldOwner(controllerName)), controllerName)
}

// WriterFor is the Writer of the named controller from plain dependencies:
// the client it applies with, and reads owners with, and the recorder of
// its Events, which must not be nil (tests use an events.FakeRecorder).
func WriterFor(c client.Client, recorder events.EventRecorder, controllerName string) *Writer {
	return writer(c, c, recorder, controllerName)
}

func writer(c client.Client, owners client.Reader, recorder events.EventRecorder, controllerName string) *Writer {
	plain := apply.NewWriter(c, FieldOwner(controllerName))
	lives, ours := ownerLives(owners), notTaken(owners, apply.AppliedAnnotationPrefix+FieldOwner(controllerName))
	return &Writer{applier: plain.Guarded(func(ctx context.Context, obj client.Object) error {
		if err := lives(ctx, obj); err != nil {
			return err
		}
		return ours(ctx, obj)
	}), unguarded: plain, recorder: recorder}
}

// WhileDeleting is w without the owner check, for the cleanup controller,
// whose children (the final backup Job) are made for a Database that is
// being deleted.
func (w *Writer) WhileDeleting() *Writer {
	return &Writer{applier: w.unguarded, unguarded: w.unguarded, recorder: w.recorder}
}

// Apply applies desired, a child of a Database, over live (nil when there
// is none) unless that could change nothing, and reports whether the child
// changed.
//
// Before it sends an apply that names a Database as owner, it reads that
// Database from the API server, not the cache, and sends nothing, with
// ErrOwnerDeleted, when it is being deleted or is gone (the check of the
// Kubernetes controllers' RecheckDeletionTimestamp). A facet acts on a
// cached Database, which may not show the deletion yet when the garbage
// collector, deleting it with orphan propagation, has already removed the
// child's owner reference: written back, the reference would have the
// collector delete the child that the user asked to keep. What remains is
// one round trip: a deletion, and the collector's orphaning, both between
// this read and the apply's arrival.
func (w *Writer) Apply(ctx context.Context, live client.Object, desired runtime.ApplyConfiguration) (bool, error) {
	return w.applier.Apply(ctx, live, desired)
}

// ownerLives is the guard of Apply: every Database that obj names as owner
// exists, with the UID obj names, and is not being deleted.
func ownerLives(r client.Reader) func(context.Context, client.Object) error {
	return func(ctx context.Context, obj client.Object) error {
		for _, ref := range obj.GetOwnerReferences() {
			if !resources.IsDatabaseKind(ref) {
				continue
			}
			db := &dbv1.Database{}
			err := r.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: ref.Name}, db)
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("reading Database %s, the owner of %s: %w", ref.Name, obj.GetName(), err)
			}
			if err != nil || db.UID != ref.UID || !db.DeletionTimestamp.IsZero() {
				return fmt.Errorf("not writing %s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), ErrOwnerDeleted)
			}
		}
		return nil
	}
}

// NotOursError is the error of an apply that was not sent because an
// object of that kind and name exists that is not the Database's: made by
// somebody else, or for another Database (resources.NotBelonging). The
// object is left untouched: a Database must never rewrite, take over or
// have garbage collection delete what another team made under the name it
// would use.
type NotOursError struct {
	// Kind and Name are the object's.
	Kind, Name string
	// Why says how it is not the Database's.
	Why string
}

func (e *NotOursError) Error() string {
	return fmt.Sprintf("%s %s already exists and is not this Database's (%s): dbkeeper leaves it untouched; "+
		"delete or rename it, or give the Database another name", e.Kind, e.Name, e.Why)
}

// OurSecret returns NotOursError unless sec, found under the name of one
// of db's Secrets that always carry its owner reference (the CA, TLS,
// replication and repository Secrets), is db's: its labels and its owner
// reference (resources.NotBelonging, strict), which a Secret made before
// db existed cannot carry. It is the check of Apply for the Secrets
// dbkeeper creates rather than applies.
func OurSecret(db *dbv1.Database, sec metav1.Object) error {
	if why := resources.NotBelonging(db.Name, db.UID, sec, true); why != "" {
		return &NotOursError{Kind: "Secret", Name: sec.GetName(), Why: why}
	}
	return nil
}

// notTaken is the second guard of Apply: an object of a Database (it names
// the Database as its controller, or, for what a deletion policy may keep,
// carries dbkeeper's managed-by and instance labels) is written only when
// no object of its kind and name exists on the API server (read past the
// cache, which holds only what dbkeeper labelled), or the one that exists
// is that Database's (resources.NotBelonging; a Secret must carry the
// Database's owner reference, not only its labels). An object without an
// owner reference that lost dbkeeper's labels but carries the record of
// this field manager's last apply (applied, see apply.Writer) is this
// Database's too: somebody took the labels off what dbkeeper made, and
// the apply puts them back. Otherwise NotOursError. Other applies (the
// role label on a StatefulSet's pod) are not checked.
func notTaken(r client.Reader, applied string) func(context.Context, client.Object) error {
	return func(ctx context.Context, obj client.Object) error {
		gvk := obj.GetObjectKind().GroupVersionKind()
		var name string
		var uid types.UID
		strict := false
		for _, ref := range obj.GetOwnerReferences() {
			if resources.IsDatabaseKind(ref) && ref.Controller != nil && *ref.Controller {
				name, uid, strict = ref.Name, ref.UID, gvk.Kind == "Secret"
			}
		}
		if l := obj.GetLabels(); name == "" && l[resources.LabelManagedBy] == resources.ManagedBy {
			name = l[resources.LabelInstance]
		}
		if name == "" {
			return nil
		}
		existing := &metav1.PartialObjectMetadata{}
		existing.SetGroupVersionKind(gvk)
		err := r.Get(ctx, client.ObjectKeyFromObject(obj), existing)
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return fmt.Errorf("reading %s %s before writing it: %w", gvk.Kind, obj.GetName(), err)
		}
		why := resources.NotBelonging(name, uid, existing, strict)
		if why == "" {
			return nil
		}
		if uid == "" && len(existing.GetOwnerReferences()) == 0 && existing.GetAnnotations()[applied] != "" {
			return nil // its labels taken off what this field manager applied
		}
		return &NotOursError{Kind: gvk.Kind, Name: obj.GetName(), Why: why}
	}
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
