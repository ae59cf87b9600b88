// Package apply writes objects with server-side apply, and sends an apply
// only when it could change something. A server-side apply of an unchanged
// object is still a write request; skipping it is what makes a reconcile of
// a converged Database cost no API writes at all.
//
// Whether an apply could change something is not a comparison of desired
// with the live object alone: a field that desired stops setting (an
// annotation removed from the spec, a key an atomic selector loses) is still
// in live, and live then "holds" all of desired although an apply would
// remove that field. So, as Cluster API's internal/util/ssa does, a Writer
// remembers what it applied: the hash of each object's last apply request
// and the resourceVersions around it. An apply is skipped only when desired
// is byte for byte the request last applied to the object, and the object
// is either at a version that apply produced (or was made on top of), or
// still has every value of desired (changed since by somebody else, but not
// in anything this field manager sets). Anything else is sent, and
// server-side apply removes the fields the field manager no longer sets.
//
// What a Writer remembers is lost with the process, so each object also
// carries the hash of its field manager's last request, in the annotation
// applied.dbkeeper.io/<field manager> that the apply itself sets: a
// restarted manager reads it off the cache and sends nothing for an object
// that its last request still describes. A status has no metadata of its
// own; after a restart, a status that still has every value of desired is
// taken as written by desired (see ApplyStatus).
package apply

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Writer applies objects and their status with one field manager, forcing
// ownership, and skips the applies that could change nothing. It is safe
// for concurrent use.
type Writer struct {
	client client.Client
	owner  string
	last   lastApplies
	// guard, when set, runs before each apply that is sent; an error from
	// it is returned and nothing is sent.
	guard func(context.Context, client.Object) error
}

// NewWriter is the Writer that applies with c as field manager owner.
func NewWriter(c client.Client, owner string) *Writer {
	return &Writer{client: c, owner: owner}
}

// Guarded is w with guard run before each apply (not status apply) that is
// sent, with the object as it would be sent: an error from guard is
// returned and nothing is sent. It is for a check too costly to make when
// nothing would be written, such as a read from the API server.
func (w *Writer) Guarded(guard func(context.Context, client.Object) error) *Writer {
	return &Writer{client: w.client, owner: w.owner, guard: guard}
}

// AppliedAnnotationPrefix, followed by the field manager, is the
// annotation that holds the hash of the field manager's last apply request
// to an object.
const AppliedAnnotationPrefix = "applied.dbkeeper.io/"

// Apply applies desired unless that could change nothing (see the package
// documentation), with the hash of desired in the annotation
// AppliedAnnotationPrefix + field manager; live is the object as last
// read, nil when there is none. It logs the write before it makes it, with
// the logger in ctx and the object under its Kind, and reports whether the
// object changed: created, or given a new resourceVersion by the apply.
func (w *Writer) Apply(ctx context.Context, live client.Object, desired runtime.ApplyConfiguration) (bool, error) {
	return w.write(live, desired, "", func(body []byte, request string) (string, error) {
		kind, ref := describe(desired)
		log.FromContext(ctx).Info("Applying object", kind, ref)
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(body); err != nil {
			return "", fmt.Errorf("converting desired object: %w", err)
		}
		annotations := u.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[w.annotation()] = request
		u.SetAnnotations(annotations)
		if w.guard != nil {
			if err := w.guard(ctx, u); err != nil {
				return "", err
			}
		}
		// The client decodes the API server's answer into u.
		err := w.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(w.owner), client.ForceOwnership)
		return u.GetResourceVersion(), err
	})
}

// ApplyStatus is Apply for the status subresource, which carries no
// annotation: a Writer that has not applied this status yet (after a
// restart) takes a status that has every value of desired as written by
// desired. It logs at V(1) before it writes, with the key/value pairs of
// the logger in ctx.
func (w *Writer) ApplyStatus(ctx context.Context, live client.Object, desired runtime.ApplyConfiguration) (bool, error) {
	return w.write(live, desired, "status", func([]byte, string) (string, error) {
		log.FromContext(ctx).V(1).Info("Applying status")
		// The client decodes the API server's answer into desired.
		err := w.client.Status().Apply(ctx, desired, client.FieldOwner(w.owner), client.ForceOwnership)
		return resourceVersion(desired), err
	})
}

// annotation is the key of the annotation that holds the hash of w's last
// apply request.
func (w *Writer) annotation() string { return AppliedAnnotationPrefix + w.owner }

// write sends the apply of desired to the subresource of live unless the
// last request of w's field manager was the same and live still has it.
// send gets the encoded request and its hash, and returns the
// resourceVersion of the API server's answer.
func (w *Writer) write(live client.Object, desired runtime.ApplyConfiguration, subresource string, send func(body []byte, request string) (string, error)) (bool, error) {
	body, err := json.Marshal(desired)
	if err != nil {
		return false, fmt.Errorf("encoding desired object: %w", err)
	}
	kind, ref := describe(desired)
	key := objectKey{subresource: subresource, kind: kind, namespace: ref.Namespace, name: ref.Name}
	sum := sha256.Sum256(body)
	request := hex.EncodeToString(sum[:])
	version := ""
	if live != nil && !isNil(live) {
		version = live.GetResourceVersion()
		last, remembered := w.last.get(key)
		if remembered && last.request == request && version != "" && (version == last.onTopOf || version == last.result) {
			return false, nil
		}
		same := remembered && last.request == request
		if !remembered {
			// A restarted manager: what live says of the last request.
			same = subresource != "" || live.GetAnnotations()[w.annotation()] == request
		}
		if same {
			kept, err := keepsValues(live, body)
			if err != nil {
				return false, err
			}
			if kept {
				if !remembered {
					w.last.remember(key, lastApply{request: request, onTopOf: version, result: version})
				}
				return false, nil
			}
		}
	}
	result, err := send(body, request)
	if err != nil {
		w.last.forget(key)
		return false, err
	}
	w.last.remember(key, lastApply{request: request, onTopOf: version, result: result})
	return version == "" || result == "" || result != version, nil
}

// Live reads the object of key into obj and returns it, or nil (of T) when
// it does not exist: the live object that Writer.Apply takes.
func Live[T client.Object](ctx context.Context, r client.Reader, key client.ObjectKey, obj T) (T, error) {
	if err := r.Get(ctx, key, obj); err != nil {
		var none T
		if apierrors.IsNotFound(err) {
			return none, nil
		}
		return none, err
	}
	return obj, nil
}

// object is what every typed apply configuration of a named object has.
type object interface {
	GetKind() *string
	GetName() *string
	GetNamespace() *string
}

// describe is the log key (the Kind) and value (namespace/name) of desired.
func describe(desired runtime.ApplyConfiguration) (string, klog.ObjectRef) {
	o, ok := desired.(object)
	if !ok {
		return "object", klog.ObjectRef{}
	}
	return ptr.Deref(o.GetKind(), "object"), klog.KRef(ptr.Deref(o.GetNamespace(), ""), ptr.Deref(o.GetName(), ""))
}

// resourceVersion is metadata.resourceVersion of an apply configuration,
// "" when it has none.
func resourceVersion(ac runtime.ApplyConfiguration) string {
	var head struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	data, err := json.Marshal(ac)
	if err != nil || json.Unmarshal(data, &head) != nil {
		return ""
	}
	return head.Metadata.ResourceVersion
}

func isNil(obj client.Object) bool {
	v := reflect.ValueOf(obj)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
