package configuration

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// steadyDatabase is a Database of n instances, x-0 primary, ReplicationReady
// True (Replicating), with max_connections lowered in its spec.
func steadyDatabase(n int32) *dbv1.Database {
	db := facettest.Database()
	db.Spec.Replicas = ptr.To(n)
	db.Spec.PostgreSQL.Parameters = map[string]dbv1.ParameterValue{"max_connections": "50"}
	db.Status.Replication = &dbv1.ReplicationStatus{CurrentPrimary: resources.InstanceName(db, 0), TargetPrimary: resources.InstanceName(db, 0)}
	db.Status.Conditions = []metav1.Condition{{Type: dbv1.ConditionReplicationReady, Status: metav1.ConditionTrue, Reason: dbv1.ReasonReplicating}}
	return db
}

// onTemplate is pod i, Ready, running the template of revision.
func onTemplate(db *dbv1.Database, i int, revision string) *corev1.Pod {
	p := pod(db, i, true)
	p.UID = types.UID(p.Name)
	p.Annotations = map[string]string{resources.AnnotationRestartRevision: revision}
	return p
}

// TestLoweredFloorRestartsThePrimaryFirst: a lowered max_connections left
// the primary pending after the rollout (the standbys kept its higher
// value, as PostgreSQL requires): the primary restarts in place first,
// then the standbys once their floor dropped; never twice for the same
// pending set; never while the Database is not steady or a pod still
// runs an older template.
func TestLoweredFloorRestartsThePrimaryFirst(t *testing.T) {
	db := steadyDatabase(3)
	spec := parameters(db)
	rev := revision(spec, map[string]bool{"max_connections": true}, nil)
	pods := []*corev1.Pod{onTemplate(db, 0, rev), onTemplate(db, 1, rev), onTemplate(db, 2, rev)}
	only := func(pending map[int]bool) []answer {
		var out []answer
		for i := range 3 {
			a := ok(resources.InstanceName(db, i), []string{"max_connections"})
			if pending[i] {
				a.res.PendingRestart = []string{"max_connections"}
			}
			out = append(out, a)
		}
		return out
	}
	done := map[string]string{}

	p, pending := inPlace(db, pods, only(map[int]bool{0: true}), 3, rev, done)
	require.NotNil(t, p)
	assert.Equal(t, resources.InstanceName(db, 0), p.Name, "the primary, the only one pending")
	assert.Equal(t, []string{"max_connections"}, pending)
	done[string(p.UID)] = key(pending)
	p, _ = inPlace(db, pods, only(map[int]bool{0: true}), 3, rev, done)
	assert.Nil(t, p, "not restarted again for what it was restarted for")

	p, _ = inPlace(db, pods, only(map[int]bool{0: true, 1: true, 2: true}), 3, rev, map[string]string{})
	require.NotNil(t, p)
	assert.Equal(t, resources.InstanceName(db, 1), p.Name, "standbys before the primary")

	p, _ = inPlace(db, []*corev1.Pod{onTemplate(db, 0, rev), onTemplate(db, 1, "old"), onTemplate(db, 2, rev)},
		only(map[int]bool{0: true}), 3, rev, map[string]string{})
	assert.Nil(t, p, "a pod on an older template: the rollout restarts the instances")

	p, _ = inPlace(db, pods, only(map[int]bool{0: true})[:2], 3, rev, map[string]string{})
	assert.Nil(t, p, "an instance not running: wait")

	rolling := steadyDatabase(3)
	rolling.Status.Conditions[0] = metav1.Condition{Type: dbv1.ConditionReplicationReady, Status: metav1.ConditionFalse, Reason: dbv1.ReasonRollingUpdate}
	p, _ = inPlace(rolling, pods, only(map[int]bool{0: true}), 3, rev, map[string]string{})
	assert.Nil(t, p, "not during a rollout, switchover or failover")

	p, _ = inPlace(db, pods, only(nil), 3, rev, map[string]string{})
	assert.Nil(t, p, "nothing pending")
}

// TestSyncRestartsInPlace: through Sync, the agent of the pending primary
// is asked to restart, once.
func TestSyncRestartsInPlace(t *testing.T) {
	db := steadyDatabase(2)
	rev := revision(parameters(db), map[string]bool{"max_connections": true}, nil)
	db.Status.Configuration = &dbv1.ConfigurationStatus{RestartRevision: rev}
	c := facettest.Client(t, db, onTemplate(db, 0, rev), onTemplate(db, 1, rev))
	a := &agents{sent: map[string]map[string]string{}, answers: map[string]agentapi.ParametersResponse{
		resources.InstanceName(db, 0): {RestartOnly: []string{"max_connections"}, PendingRestart: []string{"max_connections"}},
		resources.InstanceName(db, 1): {RestartOnly: []string{"max_connections"}},
	}}
	s := &syncer{client: c, agents: a}
	for range 2 {
		out, err := s.Sync(context.Background(), db)
		require.NoError(t, err)
		assert.Equal(t, dbv1.ReasonRestartPending, out.Condition.Reason)
	}
	assert.Equal(t, []string{resources.InstanceName(db, 0)}, a.restarted)
}
