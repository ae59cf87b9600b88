package instance_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestPrimaryName: the SQL of every controller goes to the recorded
// primary, to instance 0 before there is one.
func TestPrimaryName(t *testing.T) {
	db := facettest.Database()
	assert.Equal(t, "orders-0", instance.PrimaryName(db))
	db.Status.Replication = &dbv1.ReplicationStatus{CurrentPrimary: "orders-2"}
	assert.Equal(t, "orders-2", instance.PrimaryName(db))
}

// TestConnectGoesToThePrimary: Connect reads the current primary's pod.
func TestConnectGoesToThePrimary(t *testing.T) {
	db := facettest.Database()
	db.Status.Replication = &dbv1.ReplicationStatus{CurrentPrimary: "orders-1"}
	c := facettest.Client(t, db)
	_, err := instance.Pods{Pods: c, Secrets: c}.Connect(context.Background(), db, instance.Login{User: "u", Password: "p"}, "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "pod orders-1 does not exist")
}

// TestPodAgentsNeedTheToken: no call leaves without the replication
// Secret's agent token, and a pod without an IP is not ready.
func TestPodAgentsNeedTheToken(t *testing.T) {
	db := facettest.Database()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: "orders-0"}, Status: corev1.PodStatus{PodIP: "127.0.0.1"}}
	c := facettest.Client(t, db)
	_, err := instance.PodAgents{Secrets: c}.Status(context.Background(), db, pod)
	require.Error(t, err)
	assert.Contains(t, err.Error(), resources.ReplicationSecretName(db))

	require.NoError(t, c.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: resources.ReplicationSecretName(db)},
		Data: map[string][]byte{resources.ReplicationPasswordKey: []byte("pw")}}))
	_, err = instance.PodAgents{Secrets: c}.Status(context.Background(), db, pod)
	require.Error(t, err)
	assert.Contains(t, err.Error(), resources.AgentTokenKey)

	pod.Status.PodIP = ""
	_, err = instance.PodAgents{Secrets: c}.Status(context.Background(), db, pod)
	assert.ErrorIs(t, err, instance.ErrNotReady)
}

// TestMetricsOptionsOfTopStatements: a scrape asks for no statements
// unless spec.monitoring.topStatements does, and then for that many, in the
// application's database as the credentials Secret names it (where the
// extensions controller creates pg_stat_statements); for the user-defined
// queries of spec.monitoring.customQueries as the application's role;
// without the Secret the scrape fails naming it.
func TestMetricsOptionsOfTopStatements(t *testing.T) {
	ctx := context.Background()
	db := facettest.Database()
	c := facettest.Client(t, db)
	o, err := instance.PodAgents{Secrets: c}.MetricsOptions(ctx, db)
	require.NoError(t, err)
	assert.Equal(t, agentapi.MetricsOptions{}, o)

	db.Spec.Monitoring.TopStatements = 20
	_, err = instance.PodAgents{Secrets: c}.MetricsOptions(ctx, db)
	require.Error(t, err)
	assert.Contains(t, err.Error(), resources.CredentialsSecretName(db))
	assert.Contains(t, err.Error(), "spec.monitoring")

	require.NoError(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: resources.CredentialsSecretName(db)},
		Data: map[string][]byte{engine.UsernameKey: []byte("shop"), engine.DatabaseKey: []byte("orders_db")}}))
	o, err = instance.PodAgents{Secrets: c}.MetricsOptions(ctx, db)
	require.NoError(t, err)
	assert.Equal(t, agentapi.MetricsOptions{TopStatements: 20, StatementsDatabase: "orders_db"}, o)

	db.Spec.Monitoring.CustomQueries = &dbv1.CustomQueriesSpec{ConfigMapName: "queries"}
	o, err = instance.PodAgents{Secrets: c}.MetricsOptions(ctx, db)
	require.NoError(t, err)
	assert.Equal(t, agentapi.MetricsOptions{TopStatements: 20, StatementsDatabase: "orders_db", QueriesUser: "shop", QueriesDatabase: "orders_db"}, o)
	db.Spec.Monitoring.TopStatements = 0
	o, err = instance.PodAgents{Secrets: c}.MetricsOptions(ctx, db)
	require.NoError(t, err)
	assert.Equal(t, agentapi.MetricsOptions{QueriesUser: "shop", QueriesDatabase: "orders_db"}, o)
}
