package plugin

import (
	"regexp"
	"strings"
)

// redacted replaces every value a support bundle must not carry.
const redacted = "<redacted>"

var (
	// sensitiveName is an environment variable's (or a data key's) name
	// whose value is a secret.
	sensitiveName = regexp.MustCompile(`(?i)password|passwd|token|key|secret|credential`)
	// uriPassword is the password of a URI's user information
	// (postgres://app:PASSWORD@host).
	uriPassword = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s"']+:)[^@\s"']+@`)
	// assignedSecret is a secret assigned in a log line or a string:
	// password=..., "token": "...", secretAccessKey: ...
	assignedSecret = regexp.MustCompile(`(?i)([a-z_-]*(?:password|passwd|secret|token|api_?key|access_?key)[a-z_-]*["']?\s*[=:]\s*)("[^"]*"|'[^']*'|[^\s,;&"']+)`)
	// sqlPassword is SQL's PASSWORD 'literal' (ALTER ROLE ... PASSWORD).
	sqlPassword = regexp.MustCompile(`(?i)(\bpassword\s+)('(?:[^']|'')*')`)
	// lastApplied is kubectl's copy of an object's whole last applied
	// manifest, a Secret's data included.
	lastApplied = "kubectl.kubernetes.io/last-applied-configuration"
)

// RedactText removes the secrets a line of text may carry: a URI's
// password, password=... and its kin, SQL's PASSWORD '...'.
func RedactText(s string) string {
	s = uriPassword.ReplaceAllString(s, "${1}"+redacted+"@")
	s = assignedSecret.ReplaceAllString(s, "${1}"+redacted)
	return sqlPassword.ReplaceAllString(s, "${1}'"+redacted+"'")
}

// RedactObject removes the secrets of an object (as unstructured JSON) in
// place, for a support bundle: the values of a Secret's data and
// stringData (their keys stay), the values of data keys and of
// environment variables whose names say password, token, key, secret or
// credential, kubectl's last-applied-configuration, and whatever
// RedactText finds in every string; managedFields go too (noise).
func RedactObject(obj map[string]any) {
	if meta, ok := obj["metadata"].(map[string]any); ok {
		delete(meta, "managedFields")
		if ann, ok := meta["annotations"].(map[string]any); ok {
			if _, ok := ann[lastApplied]; ok {
				ann[lastApplied] = redacted
			}
		}
	}
	isSecret := obj["kind"] == "Secret"
	for _, field := range []string{"data", "stringData", "binaryData"} {
		if data, ok := obj[field].(map[string]any); ok {
			for k := range data {
				if isSecret || sensitiveName.MatchString(k) {
					data[k] = redacted
				}
			}
		}
	}
	redactValue(obj)
}

// redactValue walks v: name/value pairs (environment variables) with a
// sensitive name lose their value; every string goes through RedactText.
func redactValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		if name, ok := v["name"].(string); ok && sensitiveName.MatchString(name) {
			if _, ok := v["value"]; ok {
				v["value"] = redacted
			}
		}
		for k, e := range v {
			v[k] = redactValue(e)
		}
		return v
	case []any:
		for i, e := range v {
			v[i] = redactValue(e)
		}
		return v
	case string:
		if strings.ContainsAny(v, ":=@ ") {
			return RedactText(v)
		}
		return v
	}
	return v
}
