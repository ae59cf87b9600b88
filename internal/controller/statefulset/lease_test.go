package statefulset

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// The statefulset controller creates the primary Lease released, with the
// ServiceAccount and RBAC the agents hold it with, and a holder's renewals
// survive every reconcile, a restarted manager's and a changed spec's too.
func TestLeaseHolderSurvivesReconciles(t *testing.T) {
	ctx := context.Background()
	db := facettest.Database()
	c := facettest.Client(t, db)
	s := newSyncer(c, facet.WriterFor(c, events.NewFakeRecorder(10), Name))
	_, err := s.Sync(ctx, db)
	require.NoError(t, err)

	key := client.ObjectKey{Namespace: "shop", Name: resources.LeaseName(db)}
	lease := &coordinationv1.Lease{}
	require.NoError(t, c.Get(ctx, key, lease), "no primary Lease")
	assert.Nil(t, lease.Spec.HolderIdentity, "a new Lease names a holder")
	assert.True(t, metav1.IsControlledBy(lease, db), "the Lease does not go with the Database")
	for _, obj := range []client.Object{&corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}} {
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: resources.InstanceServiceAccountName(db)}, obj), "%T", obj)
		assert.True(t, metav1.IsControlledBy(obj, db), "%T does not go with the Database", obj)
	}

	// The primary's agent takes it and renews it.
	now := metav1.NowMicro()
	lease.Spec = coordinationv1.LeaseSpec{HolderIdentity: ptr.To("orders-0"), LeaseDurationSeconds: ptr.To[int32](15),
		AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr.To[int32](3)}
	require.NoError(t, c.Update(ctx, lease))
	require.NoError(t, c.Get(ctx, key, lease))
	renewed := lease.Spec.RenewTime

	_, err = s.Sync(ctx, db)
	require.NoError(t, err)
	db.Spec.Replicas = ptr.To[int32](3)
	db.Generation++
	_, err = s.Sync(ctx, db)
	require.NoError(t, err)
	restarted := newSyncer(c, facet.WriterFor(c, events.NewFakeRecorder(10), Name))
	_, err = restarted.Sync(ctx, db)
	require.NoError(t, err)

	got := &coordinationv1.Lease{}
	require.NoError(t, c.Get(ctx, key, got))
	assert.Equal(t, ptr.To("orders-0"), got.Spec.HolderIdentity, "a reconcile took the holder's lease away")
	assert.Equal(t, ptr.To[int32](3), got.Spec.LeaseTransitions)
	require.NotNil(t, got.Spec.RenewTime)
	assert.True(t, got.Spec.RenewTime.Equal(renewed), "a reconcile changed the holder's renew time")
}

// The Lease names its members (agentapi.AnnotationMembers): the pods the
// StatefulSet runs, then the holder when it is another; a converged
// reconcile writes nothing, and the agents' writes keep it.
func TestLeaseNamesItsMembers(t *testing.T) {
	ctx := context.Background()
	db := facettest.Database()
	c := facettest.Client(t, db)
	s := newSyncer(c, facet.WriterFor(c, events.NewFakeRecorder(10), Name))
	key := client.ObjectKey{Namespace: "shop", Name: resources.LeaseName(db)}
	members := func() string {
		t.Helper()
		l := &coordinationv1.Lease{}
		require.NoError(t, c.Get(ctx, key, l))
		return l.Annotations[agentapi.AnnotationMembers]
	}
	_, err := s.Sync(ctx, db)
	require.NoError(t, err)
	assert.Equal(t, "orders-0", members())

	db.Spec.Replicas = ptr.To[int32](3)
	db.Generation++
	_, err = s.Sync(ctx, db)
	require.NoError(t, err)
	assert.Equal(t, "orders-0,orders-1,orders-2", members())

	// An agent's renewal (an update of the whole object) keeps them; a
	// converged reconcile writes nothing.
	lease := &coordinationv1.Lease{}
	require.NoError(t, c.Get(ctx, key, lease))
	now := metav1.NowMicro()
	lease.Spec = coordinationv1.LeaseSpec{HolderIdentity: ptr.To("orders-1"), RenewTime: &now}
	require.NoError(t, c.Update(ctx, lease))
	require.NoError(t, c.Get(ctx, key, lease))
	rv := lease.ResourceVersion
	_, err = s.Sync(ctx, db)
	require.NoError(t, err)
	require.NoError(t, c.Get(ctx, key, lease))
	assert.Equal(t, rv, lease.ResourceVersion, "a converged reconcile wrote the Lease")
	assert.Equal(t, "orders-0,orders-1,orders-2", members())

	// A holder beyond the pods (replicas lowered under it) stays a member.
	lease.Spec.HolderIdentity = ptr.To("orders-4")
	require.NoError(t, c.Update(ctx, lease))
	_, err = s.Sync(ctx, db)
	require.NoError(t, err)
	assert.Equal(t, "orders-0,orders-1,orders-2,orders-4", members())
	require.NoError(t, c.Get(ctx, key, lease))
	assert.Equal(t, ptr.To("orders-4"), lease.Spec.HolderIdentity, "a reconcile changed the holder")
}
