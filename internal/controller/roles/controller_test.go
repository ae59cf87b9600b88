package roles

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// unreachablePrimary is a Connector whose primary is never ready; it
// counts the attempts.
type unreachablePrimary struct{ calls int }

func (u *unreachablePrimary) Connect(context.Context, *dbv1.Database, instance.Login, string) (instance.Conn, error) {
	u.calls++
	return nil, fmt.Errorf("pod orders-0 is %w", instance.ErrNotReady)
}

func secret(db *dbv1.Database, name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// TestSyncWithNothingDeclared: no spec.roles, no spec.databases, nothing
// kept before: True without connecting to the server (so that a Database
// without them costs nothing, and fake nodes without PostgreSQL see
// RolesReady True).
func TestSyncWithNothingDeclared(t *testing.T) {
	db := facettest.Database()
	primary := &unreachablePrimary{}
	s := &syncer{secrets: facettest.Client(t, db), instances: primary}
	out, err := s.Sync(context.Background(), db)
	require.NoError(t, err)
	assert.Equal(t, metav1.ConditionTrue, out.Condition.Status)
	assert.Equal(t, dbv1.ReasonRolesReconciled, out.Condition.Reason)
	assert.Zero(t, out.RequeueAfter)
	assert.Nil(t, out.Status)
	assert.Zero(t, primary.calls)
}

// TestSyncWaits: without the credentials Secret the application's role is
// not known (WaitingForCredentials); without the superuser Secret or a
// ready primary, WaitingForPrimary, retried sooner than the resync and
// later each time; status.roles is kept as it was.
func TestSyncWaits(t *testing.T) {
	ctx := context.Background()
	db := facettest.Database()
	db.Spec.Roles = []dbv1.RoleSpec{{Name: "reader"}}
	db.Status.Roles = &dbv1.RolesStatus{Roles: []string{"reader"}}
	c := facettest.Client(t, db)
	primary := &unreachablePrimary{}
	s := &syncer{secrets: c, instances: primary}

	out, err := s.Sync(ctx, db)
	require.NoError(t, err)
	assert.Equal(t, dbv1.ReasonWaitingForCredentials, out.Condition.Reason)
	assert.Contains(t, out.Condition.Message, "the credentials Secret orders-credentials is not there yet")
	assert.Equal(t, []string{"reader"}, out.Status.Roles.Roles, "status kept")

	require.NoError(t, c.Create(ctx, secret(db, resources.GeneratedSecretName(db), map[string]string{engine.UsernameKey: "app", engine.PasswordKey: "x"})))
	out, err = s.Sync(ctx, db)
	require.NoError(t, err)
	assert.Equal(t, dbv1.ReasonWaitingForPrimary, out.Condition.Reason)
	assert.Contains(t, out.Condition.Message, "orders-superuser")
	assert.Equal(t, facet.BackoffFirst, out.RequeueAfter)
	assert.Zero(t, primary.calls)

	require.NoError(t, c.Create(ctx, secret(db, resources.SuperuserSecretName(db), map[string]string{engine.UsernameKey: "postgres", engine.PasswordKey: "y"})))
	out, err = s.Sync(ctx, db)
	require.NoError(t, err)
	assert.Equal(t, metav1.ConditionFalse, out.Condition.Status)
	assert.Equal(t, dbv1.ReasonWaitingForPrimary, out.Condition.Reason)
	assert.Equal(t, "cannot reach the primary to keep spec.roles and spec.databases: pod orders-0 is not ready; retrying", out.Condition.Message)
	assert.Equal(t, 2*facet.BackoffFirst, out.RequeueAfter)
	assert.Equal(t, []string{"reader"}, out.Status.Roles.Roles, "status kept")
	assert.Equal(t, 1, primary.calls)
	for range 10 {
		out, _ = s.Sync(ctx, db)
	}
	assert.Equal(t, facet.BackoffMax, out.RequeueAfter)
}

// TestPasswordSecretsWatch: a Secret's change reaches the Databases of its
// namespace whose roles name it, and only those.
func TestPasswordSecretsWatch(t *testing.T) {
	named := facettest.Database()
	named.Spec.Roles = []dbv1.RoleSpec{{Name: "a"}, {Name: "b", PasswordSecret: &dbv1.PasswordSecretRef{Name: "b-pw"}}}
	other := facettest.Database()
	other.Name = "other"
	other.Spec.Roles = []dbv1.RoleSpec{{Name: "c", PasswordSecret: &dbv1.PasswordSecretRef{Name: "c-pw"}}}
	elsewhere := facettest.Database()
	elsewhere.Namespace = "elsewhere"
	elsewhere.Spec.Roles = named.Spec.Roles
	c := fake.NewClientBuilder().WithScheme(facettest.Scheme(t)).WithObjects(named, other, elsewhere).
		WithIndex(&dbv1.Database{}, IndexPasswordSecrets, passwordSecretsOf).Build()
	reqs := databasesNaming(c)(context.Background(), secret(named, "b-pw", nil))
	require.Len(t, reqs, 1)
	assert.Equal(t, "orders", reqs[0].Name)
	assert.Equal(t, "shop", reqs[0].Namespace)
	assert.Empty(t, databasesNaming(c)(context.Background(), secret(named, "unrelated", nil)))
}
