package resources

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
)

// The engine package speaks in core/v1 types; these turn them into apply
// configurations without losing a field: an apply configuration has the
// fields and JSON names of its type, so the conversion goes through JSON
// instead of naming fields one by one (a field left out by hand, such as
// SecretKeyRef.Optional, is silently not sent).

func envApply(env []corev1.EnvVar) []*corev1ac.EnvVarApplyConfiguration {
	out := make([]*corev1ac.EnvVarApplyConfiguration, 0, len(env))
	for i := range env {
		out = append(out, ViaJSON[corev1ac.EnvVarApplyConfiguration](&env[i]))
	}
	return out
}

func probeApply(p *corev1.Probe) *corev1ac.ProbeApplyConfiguration {
	return ViaJSON[corev1ac.ProbeApplyConfiguration](p)
}

func resourcesApply(r corev1.ResourceRequirements) *corev1ac.ResourceRequirementsApplyConfiguration {
	return ViaJSON[corev1ac.ResourceRequirementsApplyConfiguration](&r)
}

// ViaJSON decodes the JSON of an API value (core/v1, or dbkeeper's own)
// into its apply configuration T. It panics on an error, which would be a
// programming error: an API value always encodes, and its apply
// configuration decodes what it encodes.
func ViaJSON[T any](in any) *T {
	raw, err := json.Marshal(in)
	if err != nil {
		panic(fmt.Sprintf("encoding %T: %v", in, err))
	}
	out := new(T)
	if err := json.Unmarshal(raw, out); err != nil {
		panic(fmt.Sprintf("decoding %T into %T: %v", in, out, err))
	}
	return out
}
