package apply

import (
	"encoding/json"
	"fmt"
	"reflect"
)

// keepsValues reports whether every field that desired (an encoded apply
// request) sets has the same value in live. It is what a Writer asks of an
// object that somebody else changed since its last apply of desired, and
// it proves only that: not what an apply would remove, which depends on the
// request the field manager sent before (see Writer).
//
// Fields that only live has (defaults, other managers' fields, status) are
// ignored. A list is compared element by element and must have the same
// length, which can only send an apply too many, except a list named
// conditions: by the Kubernetes API conventions that is a map keyed by type
// (+listType=map, +listMapKey=type), where each controller applies its own
// entry and the others' entries are not its business.
//
// desired is compared as live's own type would hold it: a field desired sets
// to its zero value (replicas: 0, observedGeneration: 0) is one that live's
// JSON omits, and that is not a difference. Without this, a controller that
// reports a zero would write the same status on every reconcile.
func keepsValues(live any, desired []byte) (bool, error) {
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
	return contains(d, typed, l, ""), nil
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

// contains reports whether want is contained in have, for the fields of
// mask: maps key by key, lists element by element with equal length (the
// conditions by type), scalars by equality. mask is desired as it was given
// and says which fields desired sets; want is the same fields as live's
// type encodes them, where a zero value may be omitted, and then have must
// omit it (or hold it empty) too. field is the name of the field that holds
// the values.
func contains(mask, want, have any, field string) bool {
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
				if !contains(mv, wv, hv, k) {
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
		if field == conditionsField && keyed(w, conditionKey) {
			return containsByKey(m, w, h, conditionKey)
		}
		if len(w) != len(h) {
			return false
		}
		for i := range w {
			if !contains(m[i], w[i], h[i], "") {
				return false
			}
		}
		return true
	default:
		return reflect.DeepEqual(want, have)
	}
}

// conditionsField and conditionKey are the name and the map key of
// condition lists (+listType=map, +listMapKey=type).
const (
	conditionsField = "conditions"
	conditionKey    = "type"
)

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

// containsByKey reports whether each element of want is contained in the
// element of have with the same key; have may hold more elements.
func containsByKey(mask, want, have []any, key string) bool {
	for i, w := range want {
		k := w.(map[string]any)[key]
		found := false
		for _, h := range have {
			if hm, ok := h.(map[string]any); ok && hm[key] == k {
				if !contains(mask[i], w, h, "") {
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
