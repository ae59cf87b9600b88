package resources

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// ManagerPeer is the manager's pods as a NetworkPolicy names them: their
// namespace and labels (the manager's --manager-namespace and
// --manager-pod-labels). Zero when the manager runs outside the cluster.
type ManagerPeer struct {
	Namespace string
	PodLabels map[string]string
}

// NetworkPolicyName is the name of the engine pods' NetworkPolicy.
func NetworkPolicyName(db *dbv1.Database) string { return db.Name }

// namespaceNameLabel is the label the API server puts on every namespace,
// its name.
const namespaceNameLabel = "kubernetes.io/metadata.name"

// NetworkPolicy admits to the engine pods of db, on PostgreSQL's port,
// the peers of spec.networkPolicy.allowFrom (every pod of db's namespace
// when it is empty), db's own pods (standbys, backup, restore and
// verification Jobs: they carry its instance label) and the manager; on
// the agent's port only db's own pods and the manager. Nothing else
// reaches them where the cluster enforces NetworkPolicies.
func NetworkPolicy(db *dbv1.Database, port int32, manager ManagerPeer) *networkingv1ac.NetworkPolicyApplyConfiguration {
	trusted := []*networkingv1ac.NetworkPolicyPeerApplyConfiguration{
		networkingv1ac.NetworkPolicyPeer().WithPodSelector(metav1ac.LabelSelector().
			WithMatchLabels(map[string]string{LabelInstance: db.Name, LabelManagedBy: ManagedBy})),
	}
	if manager.Namespace != "" && len(manager.PodLabels) > 0 {
		trusted = append(trusted, networkingv1ac.NetworkPolicyPeer().
			WithNamespaceSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{namespaceNameLabel: manager.Namespace})).
			WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(manager.PodLabels)))
	}
	clients := make([]*networkingv1ac.NetworkPolicyPeerApplyConfiguration, 0, len(db.Spec.NetworkPolicy.AllowFrom)+len(trusted))
	for _, p := range db.Spec.NetworkPolicy.AllowFrom {
		clients = append(clients, peer(p))
	}
	if len(clients) == 0 {
		// every pod of the namespace
		clients = append(clients, networkingv1ac.NetworkPolicyPeer().WithPodSelector(metav1ac.LabelSelector()))
	}
	clients = append(clients, trusted...)
	tcp := func(p int32) *networkingv1ac.NetworkPolicyPortApplyConfiguration {
		return networkingv1ac.NetworkPolicyPort().WithProtocol(corev1.ProtocolTCP).WithPort(intstr.FromInt32(p))
	}
	return networkingv1ac.NetworkPolicy(NetworkPolicyName(db), db.Namespace).
		WithLabels(Labels(db, ComponentDatabase)).
		WithOwnerReferences(OwnerReference(db)).
		WithSpec(networkingv1ac.NetworkPolicySpec().
			WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(PodSelectorLabels(db))).
			WithPolicyTypes(networkingv1.PolicyTypeIngress).
			WithIngress(
				networkingv1ac.NetworkPolicyIngressRule().WithPorts(tcp(port)).WithFrom(clients...),
				networkingv1ac.NetworkPolicyIngressRule().WithPorts(tcp(agentapi.Port)).WithFrom(trusted...),
			))
}

// peer is p as an apply configuration.
func peer(p networkingv1.NetworkPolicyPeer) *networkingv1ac.NetworkPolicyPeerApplyConfiguration {
	out := networkingv1ac.NetworkPolicyPeer()
	if p.PodSelector != nil {
		out.WithPodSelector(labelSelector(p.PodSelector))
	}
	if p.NamespaceSelector != nil {
		out.WithNamespaceSelector(labelSelector(p.NamespaceSelector))
	}
	if b := p.IPBlock; b != nil {
		out.WithIPBlock(networkingv1ac.IPBlock().WithCIDR(b.CIDR).WithExcept(b.Except...))
	}
	return out
}

// labelSelector is s as an apply configuration.
func labelSelector(s *metav1.LabelSelector) *metav1ac.LabelSelectorApplyConfiguration {
	out := metav1ac.LabelSelector()
	if len(s.MatchLabels) > 0 {
		out.WithMatchLabels(s.MatchLabels)
	}
	for _, r := range s.MatchExpressions {
		out.WithMatchExpressions(metav1ac.LabelSelectorRequirement().WithKey(r.Key).WithOperator(r.Operator).WithValues(r.Values...))
	}
	return out
}
