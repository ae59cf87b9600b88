package resources_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestNetworkPolicy: the engine pods' NetworkPolicy selects exactly them
// and admits, on PostgreSQL's port, every pod of the namespace (or the
// peers of spec.networkPolicy.allowFrom instead), the Database's own pods
// and the manager's; on the agent's port only the Database's own pods and
// the manager's. A manager outside the cluster (no peer) is left out.
func TestNetworkPolicy(t *testing.T) {
	manager := resources.ManagerPeer{Namespace: "dbkeeper-system", PodLabels: map[string]string{"app.kubernetes.io/name": "dbkeeper"}}
	db := sample("orders", nil)
	np := decode[networkingv1.NetworkPolicy](t, resources.NetworkPolicy(db, 5432, manager))
	assert.Equal(t, resources.NetworkPolicyName(db), np.Name)
	assert.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes, "egress untouched")
	pods, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	require.NoError(t, err)
	assert.True(t, pods.Matches(labels.Set(resources.PodSelectorLabels(db))), "selects the engine pods")
	other := sample("payments", nil)
	assert.False(t, pods.Matches(labels.Set(resources.PodSelectorLabels(other))), "selects another Database's pods")

	require.Len(t, np.Spec.Ingress, 2)
	server, agentRule := np.Spec.Ingress[0], np.Spec.Ingress[1]
	require.Len(t, server.Ports, 1)
	assert.Equal(t, int32(5432), server.Ports[0].Port.IntVal)
	require.Len(t, agentRule.Ports, 1)
	assert.Equal(t, agentapi.Port, agentRule.Ports[0].Port.IntVal)

	admits := func(rule networkingv1.NetworkPolicyIngressRule, ns string, podLabels map[string]string) bool {
		for _, p := range rule.From {
			if p.IPBlock != nil {
				continue
			}
			inNamespace := ns == db.Namespace
			if p.NamespaceSelector != nil {
				s, err := metav1.LabelSelectorAsSelector(p.NamespaceSelector)
				require.NoError(t, err)
				inNamespace = s.Matches(labels.Set{"kubernetes.io/metadata.name": ns})
			}
			s, err := metav1.LabelSelectorAsSelector(p.PodSelector)
			require.NoError(t, err)
			if inNamespace && (p.PodSelector == nil || s.Matches(labels.Set(podLabels))) {
				return true
			}
		}
		return false
	}
	app := map[string]string{"app": "shop"}
	standby := resources.PodSelectorLabels(db)
	standby[resources.LabelManagedBy] = resources.ManagedBy
	backupJob := resources.Labels(db, resources.ComponentBackup)
	managerPod := map[string]string{"app.kubernetes.io/name": "dbkeeper", "pod-template-hash": "x"}
	for _, tc := range []struct {
		who             string
		ns              string
		labels          map[string]string
		server, agentOK bool
	}{
		{"an application pod of the namespace", db.Namespace, app, true, false},
		{"a pod of another namespace", "elsewhere", app, false, false},
		{"a standby", db.Namespace, standby, true, true},
		{"a backup Job's pod", db.Namespace, backupJob, true, true},
		{"the manager", "dbkeeper-system", managerPod, true, true},
		{"a pod with the manager's labels elsewhere", "elsewhere", managerPod, false, false},
	} {
		assert.Equal(t, tc.server, admits(server, tc.ns, tc.labels), "PostgreSQL's port from %s", tc.who)
		assert.Equal(t, tc.agentOK, admits(agentRule, tc.ns, tc.labels), "the agent's port from %s", tc.who)
	}

	restricted := sample("orders", func(db *dbv1.Database) {
		db.Spec.NetworkPolicy.AllowFrom = []networkingv1.NetworkPolicyPeer{
			{PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"shop"}}}}},
			{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"10.1.0.0/16"}}},
		}
	})
	np = decode[networkingv1.NetworkPolicy](t, resources.NetworkPolicy(restricted, 5432, resources.ManagerPeer{}))
	server, agentRule = np.Spec.Ingress[0], np.Spec.Ingress[1]
	assert.Equal(t, restricted.Spec.NetworkPolicy.AllowFrom, server.From[:2], "spec.networkPolicy.allowFrom as given")
	assert.True(t, admits(server, db.Namespace, app))
	assert.False(t, admits(server, db.Namespace, map[string]string{"app": "batch"}), "allowFrom replaces the namespace default")
	assert.True(t, admits(server, db.Namespace, standby), "the Database's own pods stay admitted")
	assert.False(t, admits(server, "dbkeeper-system", managerPod), "no manager peer: none admitted")
	assert.Len(t, agentRule.From, 1, "only the Database's own pods")
}
