package configuration

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// answer is what one instance's agent answered, or the error of the call.
type answer struct {
	pod string
	res agentapi.ParametersResponse
	err error
}

// verdict is what the answers of a Database's instances add up to.
type verdict struct {
	condition metav1.Condition
	// pending are the parameters some instance waits to restart for.
	pending []string
	// revision is status.configuration.restartRevision.
	revision string
}

// judge adds up the answers of the instances that run (Ready pods; want
// instances should) for the parameters of spec. An instance that does not
// run is not waited for: it takes the parameters once it runs (the
// Database's pods are watched). previous is the restart revision the
// Database has: it is kept unless every one of want answered, so that the
// pods' template changes only once every instance has written the new
// values.
func judge(spec map[string]string, want int, answers []answer, previous string) verdict {
	refused := map[string][]string{} // name → "pod: message"
	pending := map[string][]string{} // name → pods
	restartOnly := map[string]bool{} // names
	var unreachable []string         // "pod: error"
	for _, a := range answers {
		if a.err != nil {
			unreachable = append(unreachable, fmt.Sprintf("%s (%v)", a.pod, a.err))
			continue
		}
		for name, msg := range a.res.Refused {
			refused[name] = append(refused[name], a.pod+": "+msg)
		}
		for _, name := range a.res.PendingRestart {
			pending[name] = append(pending[name], a.pod)
		}
		for _, name := range a.res.RestartOnly {
			restartOnly[name] = true
		}
	}
	v := verdict{revision: previous, pending: slices.Sorted(maps.Keys(pending))}
	answered := len(answers) - len(unreachable)
	if answered == want && want > 0 {
		v.revision = revision(spec, restartOnly, refused)
	}
	// an instance that does not run yet takes them when it does
	every := "every instance"
	if answered < want {
		every = fmt.Sprintf("%d of %d instances (the others once they run)", answered, want)
	}
	switch {
	case len(refused) > 0:
		var parts []string
		for _, name := range slices.Sorted(maps.Keys(refused)) {
			parts = append(parts, fmt.Sprintf("%s: %s", fieldOf(name), oneMessage(refused[name])))
		}
		v.condition = metav1.Condition{Status: metav1.ConditionFalse, Reason: dbv1.ReasonParameterRefused,
			Message: "PostgreSQL refused " + strings.Join(parts, "; ") + "; the parameter is left as it was, the others are applied"}
	case len(unreachable) > 0:
		v.condition = metav1.Condition{Status: metav1.ConditionFalse, Reason: dbv1.ReasonInstancesUnreachable,
			Message: fmt.Sprintf("%d of %d running instances took the parameters; no answer from %s; retrying",
				answered, len(answers), strings.Join(unreachable, ", "))}
	case len(pending) > 0:
		var parts []string
		for _, name := range v.pending {
			parts = append(parts, fmt.Sprintf("%s (%s)", name, strings.Join(pending[name], ", ")))
		}
		v.condition = metav1.Condition{Status: metav1.ConditionTrue, Reason: dbv1.ReasonRestartPending,
			Message: "written on " + every + "; waiting for a restart: " + strings.Join(parts, ", ") +
				"; the instances restart in the usual order (standbys, one switchover, the former primary)"}
	case len(spec) == 0:
		v.condition = metav1.Condition{Status: metav1.ConditionTrue, Reason: dbv1.ReasonParametersApplied,
			Message: "spec.postgresql.parameters is empty: dbkeeper's settings and PostgreSQL's defaults on " + every}
	default:
		n, preload := len(spec), ""
		if libs, ok := spec[preloadParameter]; ok {
			n--
			preload = fmt.Sprintf(", and shared_preload_libraries = %s for spec.postgresql.extensions", libs)
		}
		v.condition = metav1.Condition{Status: metav1.ConditionTrue, Reason: dbv1.ReasonParametersApplied,
			Message: fmt.Sprintf("the %d parameters of spec.postgresql.parameters%s are applied on %s", n, preload, every)}
	}
	return v
}

// fieldOf is the field of the spec a parameter comes from.
func fieldOf(name string) string {
	if name == preloadParameter {
		return "spec.postgresql.extensions (" + preloadParameter + ")"
	}
	return "spec.postgresql.parameters." + name
}

// oneMessage is the message of a refused parameter: PostgreSQL's, once
// when every instance said the same, with the instances that said it.
func oneMessage(byPod []string) string {
	slices.Sort(byPod)
	msgs := map[string][]string{}
	for _, s := range byPod {
		pod, msg, _ := strings.Cut(s, ": ")
		msgs[msg] = append(msgs[msg], pod)
	}
	var parts []string
	for _, msg := range slices.Sorted(maps.Keys(msgs)) {
		parts = append(parts, fmt.Sprintf("%s (%s)", msg, strings.Join(msgs[msg], ", ")))
	}
	return strings.Join(parts, "; ")
}

// revision identifies the values of spec's restart-only parameters that
// no instance refused; "" when there are none (no annotation on the
// template: a Database without such parameters never restarts for them).
func revision(spec map[string]string, restartOnly map[string]bool, refused map[string][]string) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(restartOnly)) {
		value, ok := spec[name]
		if !ok || len(refused[name]) > 0 {
			continue
		}
		fmt.Fprintf(&b, "%s=%q\n", name, value)
	}
	if b.Len() == 0 {
		return ""
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])[:16]
}
