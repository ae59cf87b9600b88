package integration

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestNetworkPolicyFollowsTheSpec (issue 29): a Database gets a
// NetworkPolicy for its engine pods, owned by it, admitting PostgreSQL's
// port from its namespace and the agent's from its own pods only;
// spec.networkPolicy.allowFrom replaces the namespace default;
// spec.networkPolicy.enabled false removes it (ServiceReady says so) and
// true brings it back. The API server accepts what dbkeeper writes.
func TestNetworkPolicyFollowsTheSpec(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, ns, "*")
	ctx := context.Background()
	db := convergeReady(t, newDatabase(ns, "fenced"))
	key := client.ObjectKey{Namespace: ns, Name: resources.NetworkPolicyName(db)}
	np := &networkingv1.NetworkPolicy{}
	require.NoError(t, admin.Get(ctx, key, np))
	assert.True(t, metav1.IsControlledBy(np, getDatabase(t, db)), "owned by the Database")
	require.Len(t, np.Spec.Ingress, 2)
	assert.Equal(t, &metav1.LabelSelector{}, np.Spec.Ingress[0].From[0].PodSelector, "PostgreSQL's port from every pod of the namespace")
	assert.Nil(t, np.Spec.Ingress[0].From[0].NamespaceSelector)
	assert.Equal(t, agentapi.Port, np.Spec.Ingress[1].Ports[0].Port.IntVal)
	for _, p := range np.Spec.Ingress[1].From {
		assert.NotEqual(t, &metav1.LabelSelector{}, p.PodSelector, "the agent's port from any pod")
	}

	shop := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "shop"}}}
	patchDatabase(t, db, func(d *dbv1.Database) { d.Spec.NetworkPolicy.AllowFrom = []networkingv1.NetworkPolicyPeer{shop} })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &networkingv1.NetworkPolicy{}
		if assert.NoError(c, admin.Get(ctx, key, got)) && assert.NotEmpty(c, got.Spec.Ingress) {
			assert.Equal(c, shop, got.Spec.Ingress[0].From[0], "spec.networkPolicy.allowFrom")
			for _, p := range got.Spec.Ingress[0].From {
				assert.NotEqual(c, &metav1.LabelSelector{}, p.PodSelector, "the namespace default is gone")
			}
		}
	}, timeout, tick)

	patchDatabase(t, db, func(d *dbv1.Database) { d.Spec.NetworkPolicy.Enabled = ptr.To(false) })
	require.Eventually(t, func() bool { return apierrors.IsNotFound(admin.Get(ctx, key, &networkingv1.NetworkPolicy{})) },
		timeout, tick, "the NetworkPolicy removed")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, condition(c, db, dbv1.ConditionServiceReady).Message, "no NetworkPolicy: spec.networkPolicy.enabled is false")
	}, timeout, tick)

	patchDatabase(t, db, func(d *dbv1.Database) { d.Spec.NetworkPolicy.Enabled = nil })
	require.Eventually(t, func() bool { return admin.Get(ctx, key, &networkingv1.NetworkPolicy{}) == nil }, timeout, tick, "the NetworkPolicy back")
}
