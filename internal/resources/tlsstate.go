package resources

import (
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// ServerTLS says whether a Database's server requires TLS on TCP
// connections; the builders of the pods that run or reach the server take
// it. TLSFor decides it.
type ServerTLS bool

// The two ServerTLS values.
const (
	TLSOff ServerTLS = false
	TLSOn  ServerTLS = true
)

// TLSState is why a Database's server does or does not use TLS.
type TLSState string

const (
	// TLSRequired: spec.tls.mode is Required, or unset on a Database whose
	// StatefulSet does not exist yet or already runs with TLS.
	TLSRequired TLSState = "Required"
	// TLSDisabled: spec.tls.mode is Disabled.
	TLSDisabled TLSState = "Disabled"
	// TLSPlaintextKept: spec.tls is unset and the StatefulSet was made
	// before dbkeeper had TLS: it keeps plaintext, so that an upgrade
	// neither restarts the server nor breaks clients without TLS.
	TLSPlaintextKept TLSState = "PlaintextKept"
)

// On is the ServerTLS of the state.
func (s TLSState) On() ServerTLS { return ServerTLS(s == TLSRequired) }

// TLSFor decides whether the Database's server uses TLS, from spec.tls and
// the live StatefulSet (nil when there is none): a spec.tls wins (Disabled
// turns TLS off, anything else asks for it); without one, a Database gets TLS unless its StatefulSet already runs
// without it (made before dbkeeper had TLS). Every controller that builds
// a pod reaching the server asks this, so they agree.
func TLSFor(db *dbv1.Database, live *appsv1.StatefulSet) TLSState {
	if db.Spec.TLS != nil {
		if db.Spec.TLS.Mode == dbv1.TLSModeDisabled {
			return TLSDisabled
		}
		return TLSRequired // Required, or an issuerRef: spec.tls asks for TLS
	}
	if live == nil || hasTLSVolume(live) {
		return TLSRequired
	}
	return TLSPlaintextKept
}

// PodServesTLS reports whether an engine pod was built with TLS (it
// mounts the server certificate): the server it runs requires TLS on TCP,
// and a client verifies it with the CA of TLSSecretName.
func PodServesTLS(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == tlsVolume })
}

// PodAgentServesTLS reports whether an engine pod's agent serves its
// endpoint over HTTPS with the certificate of TLSSecretName: with the
// server's TLS, or with its own mount when the server has none
// (addAgentTLS). A pod built before either serves plain HTTP.
func PodAgentServesTLS(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == tlsVolume || v.Name == AgentTLSVolume })
}

func hasTLSVolume(sts *appsv1.StatefulSet) bool {
	return slices.ContainsFunc(sts.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == tlsVolume })
}
