package resources

import (
	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
)

// The engine package speaks in core/v1 types; these turn them into apply
// configurations without losing a field.

func envApply(env []corev1.EnvVar) []*corev1ac.EnvVarApplyConfiguration {
	out := make([]*corev1ac.EnvVarApplyConfiguration, 0, len(env))
	for _, e := range env {
		a := corev1ac.EnvVar().WithName(e.Name)
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			a.WithValueFrom(corev1ac.EnvVarSource().WithSecretKeyRef(
				corev1ac.SecretKeySelector().WithName(ref.Name).WithKey(ref.Key)))
		default:
			a.WithValue(e.Value)
		}
		out = append(out, a)
	}
	return out
}

func probeApply(p *corev1.Probe) *corev1ac.ProbeApplyConfiguration {
	a := corev1ac.Probe().
		WithPeriodSeconds(p.PeriodSeconds).
		WithTimeoutSeconds(p.TimeoutSeconds).
		WithFailureThreshold(p.FailureThreshold)
	if p.InitialDelaySeconds > 0 {
		a.WithInitialDelaySeconds(p.InitialDelaySeconds)
	}
	switch {
	case p.Exec != nil:
		a.WithExec(corev1ac.ExecAction().WithCommand(p.Exec.Command...))
	case p.TCPSocket != nil:
		a.WithTCPSocket(corev1ac.TCPSocketAction().WithPort(p.TCPSocket.Port))
	}
	return a
}

func resourcesApply(r corev1.ResourceRequirements) *corev1ac.ResourceRequirementsApplyConfiguration {
	a := corev1ac.ResourceRequirements()
	if len(r.Requests) > 0 {
		a.WithRequests(r.Requests)
	}
	if len(r.Limits) > 0 {
		a.WithLimits(r.Limits)
	}
	return a
}
