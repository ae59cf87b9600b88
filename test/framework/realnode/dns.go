package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// corefile serves cluster.local from the API server on the node IP only.
// It has no forward plugin (a name outside the cluster gets SERVFAIL, never
// an upstream query), and short TTLs: a client that looks a Service up just
// before it exists must not wait out a 30 s negative cache.
func corefile(kubeconfig string) string {
	return fmt.Sprintf(`.:53 {
    bind %s
    errors
    kubernetes %s in-addr.arpa ip6.arpa {
        kubeconfig %s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
    cache 5 {
        denial 9984 2
    }
}
`, NodeIP, clusterDomain, kubeconfig)
}

// startDNS starts CoreDNS on the node IP and creates the kube-dns Service
// with an EndpointSlice pointing at it.
func (n *Node) startDNS(ctx context.Context, kubeconfig string) error {
	path := filepath.Join(n.c.Dir, "Corefile")
	if err := os.WriteFile(path, []byte(corefile(kubeconfig)), 0o644); err != nil {
		return fmt.Errorf("writing the Corefile: %w", err)
	}
	if err := n.start(nil, "coredns", filepath.Join(n.c.Bin, "coredns"), "-conf", path); err != nil {
		return err
	}
	labels := map[string]string{"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns", Labels: labels},
		Spec: corev1.ServiceSpec{
			ClusterIP: DNSServiceIP,
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
			},
		},
	}
	if err := n.c.Client.Create(ctx, svc); err != nil {
		return fmt.Errorf("creating Service kube-system/kube-dns: %w", err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns-node", Labels: map[string]string{
			discoveryv1.LabelServiceName: "kube-dns", discoveryv1.LabelManagedBy: "dbkeeper-test-cluster",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{NodeIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			NodeName:   n.dnsNodeName(),
		}},
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("dns"), Port: ptr.To[int32](53), Protocol: ptr.To(corev1.ProtocolUDP)},
			{Name: ptr.To("dns-tcp"), Port: ptr.To[int32](53), Protocol: ptr.To(corev1.ProtocolTCP)},
		},
	}
	if err := n.c.Client.Create(ctx, slice); err != nil {
		return fmt.Errorf("creating the EndpointSlice of kube-dns: %w", err)
	}
	return nil
}

// dnsNodeName is the node of CoreDNS's endpoint: the single node, whose
// network namespace (the host's) it runs in; none with several nodes.
func (n *Node) dnsNodeName() *string {
	if len(n.members) > 1 {
		return nil
	}
	return ptr.To(NodeName)
}
