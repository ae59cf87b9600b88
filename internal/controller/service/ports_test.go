package service

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
)

func TestHasForeignPorts(t *testing.T) {
	desired := corev1ac.Service("db", "ns").WithSpec(corev1ac.ServiceSpec().
		WithPorts(corev1ac.ServicePort().WithName("postgres").WithPort(5432).WithProtocol(corev1.ProtocolTCP)))
	for name, tc := range map[string]struct {
		live []corev1.ServicePort
		want bool
	}{
		"the same port":          {live: []corev1.ServicePort{{Name: "postgres", Port: 5432, Protocol: corev1.ProtocolTCP}}, want: false},
		"none yet":               {live: nil, want: false},
		"the number edited":      {live: []corev1.ServicePort{{Name: "postgres", Port: 15432, Protocol: corev1.ProtocolTCP}}, want: true},
		"the protocol edited":    {live: []corev1.ServicePort{{Name: "postgres", Port: 5432, Protocol: corev1.ProtocolUDP}}, want: true},
		"a port added by a tool": {live: []corev1.ServicePort{{Name: "postgres", Port: 5432, Protocol: corev1.ProtocolTCP}, {Name: "metrics", Port: 9187, Protocol: corev1.ProtocolTCP}}, want: true},
	} {
		t.Run(name, func(t *testing.T) {
			live := &corev1.Service{Spec: corev1.ServiceSpec{Ports: tc.live}}
			assert.Equal(t, tc.want, hasForeignPorts(live, desired))
		})
	}
}
