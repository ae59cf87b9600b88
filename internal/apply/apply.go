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

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Apply applies desired with the given field owner, forcing ownership, unless
// live (which may be nil: not found) already holds every field of desired.
// It reports whether it wrote.
func Apply(ctx context.Context, c client.Client, live client.Object, desired runtime.ApplyConfiguration, owner string) (bool, error) {
	return write(ctx, live, desired, func() error {
		return c.Apply(ctx, desired, client.FieldOwner(owner), client.ForceOwnership)
	})
}

// ApplyStatus is Apply for the status subresource.
func ApplyStatus(ctx context.Context, c client.Client, live client.Object, desired runtime.ApplyConfiguration, owner string) (bool, error) {
	return write(ctx, live, desired, func() error {
		return c.Status().Apply(ctx, desired, client.FieldOwner(owner), client.ForceOwnership)
	})
}

func write(ctx context.Context, live client.Object, desired runtime.ApplyConfiguration, do func() error) (bool, error) {
	if live != nil && !isNil(live) {
		held, err := Holds(live, desired)
		if err != nil {
			return false, err
		}
		if held {
			return false, nil
		}
	}
	return true, do()
}

// Holds reports whether every field set in desired has the same value in
// live. Fields that only live has (defaults, other managers' fields, status)
// are ignored; lists of conditions are matched by type, other lists must have
// the same length and hold element by element.
func Holds(live any, desired any) (bool, error) {
	l, err := toMap(live)
	if err != nil {
		return false, fmt.Errorf("converting live object: %w", err)
	}
	d, err := toMap(desired)
	if err != nil {
		return false, fmt.Errorf("converting desired object: %w", err)
	}
	// Typed objects from the cache carry no kind; the apply configuration
	// always does. Neither is a field that can drift.
	delete(d, "apiVersion")
	delete(d, "kind")
	return subset(d, l), nil
}

func toMap(obj any) (map[string]any, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	return m, json.Unmarshal(raw, &m)
}

// subset reports whether want is contained in have: maps key by key, lists
// element by element with equal length, scalars by equality.
func subset(want, have any) bool {
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return len(w) == 0 && have == nil
		}
		for k, wv := range w {
			hv, ok := h[k]
			if !ok {
				if isEmpty(wv) {
					continue
				}
				return false
			}
			if !subset(wv, hv) {
				return false
			}
		}
		return true
	case []any:
		h, ok := have.([]any)
		if !ok {
			return len(w) == 0 && have == nil
		}
		if keyed(w, conditionKey) {
			return subsetByKey(w, h, conditionKey)
		}
		if len(w) != len(h) {
			return false
		}
		for i := range w {
			if !subset(w[i], h[i]) {
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

// subsetByKey reports whether each element of want is contained in the
// element of have with the same key; have may hold more elements.
func subsetByKey(want, have []any, key string) bool {
	for _, w := range want {
		k := w.(map[string]any)[key]
		found := false
		for _, h := range have {
			if hm, ok := h.(map[string]any); ok && hm[key] == k {
				if !subset(w, h) {
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
