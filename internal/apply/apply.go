// Package apply writes objects with server-side apply, and only when the live
// object does not already hold what would be applied. A server-side apply of
// an unchanged object is still a write request; skipping it is what makes a
// reconcile of a converged Database cost no API writes at all.
package apply

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Apply applies desired with the given field owner, forcing ownership, unless
// live (which may be nil: not found) already holds every field of desired.
// It logs the write before it makes it, with the logger in ctx and the
// object under its Kind, and reports whether it wrote.
func Apply(ctx context.Context, c client.Client, live client.Object, desired runtime.ApplyConfiguration, owner string) (bool, error) {
	return write(live, desired, owner, nil, func() error {
		kind, ref := describe(desired)
		log.FromContext(ctx).Info("Applying object", kind, ref)
		return c.Apply(ctx, desired, client.FieldOwner(owner), client.ForceOwnership)
	})
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

// compare reports whether live (which may be nil) lacks a field of desired,
// with desired encoded when live is not nil.
func compare(live client.Object, desired runtime.ApplyConfiguration) ([]byte, bool, error) {
	if live == nil || isNil(live) {
		return nil, true, nil
	}
	body, err := json.Marshal(desired)
	if err != nil {
		return nil, false, fmt.Errorf("encoding desired object: %w", err)
	}
	held, err := holdsJSON(live, body)
	if err != nil {
		return nil, false, err
	}
	return body, !held, nil
}

// ApplyStatus is Apply for the status subresource.
func ApplyStatus(ctx context.Context, c client.Client, live client.Object, desired runtime.ApplyConfiguration, owner string) (bool, error) {
	return (*Sent)(nil).ApplyStatus(ctx, c, live, desired, owner)
}

// write runs do unless live already holds desired or sent (which may be
// nil) has made the same apply on top of the version live is at.
func write(live client.Object, desired runtime.ApplyConfiguration, owner string, sent *Sent, do func() error) (bool, error) {
	body, needed, err := compare(live, desired)
	if err != nil {
		return false, err
	}
	if body == nil {
		return true, do()
	}
	key := owner + " " + live.GetNamespace() + "/" + live.GetName()
	if !needed {
		sent.forget(key)
		return false, nil
	}
	if sent.already(key, body, live.GetResourceVersion()) {
		return false, nil
	}
	if err := do(); err != nil {
		sent.forget(key)
		return true, err
	}
	sent.remember(key, sentApply{body: body, onTopOf: live.GetResourceVersion(), at: time.Now()})
	return true, nil
}

// Holds reports whether every field set in desired has the same value in
// live. Fields that only live has (defaults, other managers' fields, status)
// are ignored; lists of conditions are matched by type, other lists must have
// the same length and hold element by element.
//
// desired is compared as live's own type would hold it: a field desired sets
// to its zero value (replicas: 0, observedGeneration: 0) is one that live's
// JSON omits, and that is not a difference. Without this, a controller that
// reports a zero would write the same status on every reconcile.
func Holds(live any, desired any) (bool, error) {
	raw, err := json.Marshal(desired)
	if err != nil {
		return false, fmt.Errorf("encoding desired object: %w", err)
	}
	return holdsJSON(live, raw)
}

// holdsJSON is Holds for desired already encoded.
func holdsJSON(live any, desired []byte) (bool, error) {
	l, err := toMap(live)
	if err != nil {
		return false, fmt.Errorf("converting live object: %w", err)
	}
	d := map[string]any{}
	if err := json.Unmarshal(desired, &d); err != nil {
		return false, fmt.Errorf("converting desired object: %w", err)
	}
	typed, err := asTypeOf(live, desired)
	if err != nil {
		return false, fmt.Errorf("converting desired object to %T: %w", live, err)
	}
	// Typed objects from the cache carry no kind; the apply configuration
	// always does. Neither is a field that can drift.
	for _, m := range []map[string]any{d, typed} {
		delete(m, "apiVersion")
		delete(m, "kind")
	}
	return holds(d, typed, l), nil
}

func toMap(obj any) (map[string]any, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	return m, json.Unmarshal(raw, &m)
}

// asTypeOf is desired decoded into a new value of live's type and encoded
// again, so that it omits exactly what live's encoding omits.
func asTypeOf(live any, desired []byte) (map[string]any, error) {
	t := reflect.TypeOf(live)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	typed := reflect.New(t)
	if err := json.Unmarshal(desired, typed.Interface()); err != nil {
		return nil, err
	}
	return toMap(typed.Interface())
}

// holds reports whether want is contained in have, for the fields of mask:
// maps key by key, lists element by element with equal length, scalars by
// equality. mask is desired as it was given and says which fields desired
// sets; want is the same fields as live's type encodes them, where a zero
// value may be omitted, and then have must omit it (or hold it empty) too.
func holds(mask, want, have any) bool {
	switch m := mask.(type) {
	case map[string]any:
		w, _ := want.(map[string]any)
		h, _ := have.(map[string]any)
		for k, mv := range m {
			wv, inWant := w[k]
			hv, inHave := h[k]
			switch {
			case !inWant && !inHave:
			case !inWant:
				if !isEmpty(hv) {
					return false
				}
			case !inHave:
				if !isEmpty(wv) {
					return false
				}
			default:
				if !holds(mv, wv, hv) {
					return false
				}
			}
		}
		return true
	case []any:
		w, _ := want.([]any)
		h, _ := have.([]any)
		if len(m) != len(w) {
			m = w // never for a faithful decoding; then want is its own mask
		}
		if keyed(w, conditionKey) {
			return holdsByKey(m, w, h, conditionKey)
		}
		if len(w) != len(h) {
			return false
		}
		for i := range w {
			if !holds(m[i], w[i], h[i]) {
				return false
			}
		}
		return true
	default:
		return reflect.DeepEqual(want, have)
	}
}

// conditionKey is the map key of condition lists (+listType=map,
// +listMapKey=type): there each controller applies its own entry and the
// others' entries are not its business.
const conditionKey = "type"

// keyed reports whether every element of the list is a map with a string
// value under key.
func keyed(list []any, key string) bool {
	for _, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			return false
		}
		if _, ok := m[key].(string); !ok {
			return false
		}
	}
	return len(list) > 0
}

// holdsByKey reports whether each element of want is contained in the
// element of have with the same key; have may hold more elements.
func holdsByKey(mask, want, have []any, key string) bool {
	for i, w := range want {
		k := w.(map[string]any)[key]
		found := false
		for _, h := range have {
			if hm, ok := h.(map[string]any); ok && hm[key] == k {
				if !holds(mask[i], w, h) {
					return false
				}
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// isEmpty is true for values that the API server drops when stored, such as
// `resources: {}`, so that asking for them never counts as a difference.
func isEmpty(v any) bool {
	switch t := v.(type) {
	case map[string]any:
		for _, e := range t {
			if !isEmpty(e) {
				return false
			}
		}
		return true
	case []any:
		return len(t) == 0
	case nil:
		return true
	}
	return false
}

func isNil(obj client.Object) bool {
	v := reflect.ValueOf(obj)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
