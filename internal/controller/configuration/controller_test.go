package configuration

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// agents is a fake of the instances' agents: it records what each was sent
// and answers what the test set.
type agents struct {
	mu      sync.Mutex
	sent    map[string]map[string]string
	answers map[string]agentapi.ParametersResponse
	down    map[string]bool
	// restarted are the pods restarted in place, in order.
	restarted []string
}

func (a *agents) Restart(_ context.Context, _ *dbv1.Database, pod *corev1.Pod) (agentapi.Status, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.restarted = append(a.restarted, pod.Name)
	return agentapi.Status{}, nil
}

func (a *agents) Parameters(_ context.Context, _ *dbv1.Database, pod *corev1.Pod, req agentapi.ParametersRequest) (agentapi.ParametersResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.down[pod.Name] {
		return agentapi.ParametersResponse{}, errors.New("connection refused")
	}
	a.sent[pod.Name] = req.Parameters
	return a.answers[pod.Name], nil
}

func pod(db *dbv1.Database, i int, ready bool) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: resources.InstanceName(db, i), Namespace: db.Namespace, Labels: resources.PodSelectorLabels(db)},
		Status:     corev1.PodStatus{PodIP: "198.18.1.1", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

// TestSyncSendsTheSpecToEveryRunningInstance: every Ready pod's agent gets
// spec.postgresql.parameters; a pod not Ready is not called, and the
// restart revision waits for it.
func TestSyncSendsTheSpecToEveryRunningInstance(t *testing.T) {
	db := facettest.Database()
	db.Spec.Replicas = ptr.To[int32](3)
	db.Spec.PostgreSQL.Parameters = map[string]dbv1.ParameterValue{"work_mem": "64MB", "max_connections": "200"}
	c := facettest.Client(t, db, pod(db, 0, true), pod(db, 1, true), pod(db, 2, false))
	restart := agentapi.ParametersResponse{RestartOnly: []string{"max_connections"}, PendingRestart: []string{"max_connections"}}
	a := &agents{sent: map[string]map[string]string{}, answers: map[string]agentapi.ParametersResponse{
		resources.InstanceName(db, 0): restart, resources.InstanceName(db, 1): restart,
	}}
	s := &syncer{client: c, agents: a}

	out, err := s.Sync(context.Background(), db)
	require.NoError(t, err)
	want := map[string]string{"work_mem": "64MB", "max_connections": "200"}
	assert.Equal(t, want, a.sent[resources.InstanceName(db, 0)])
	assert.Equal(t, want, a.sent[resources.InstanceName(db, 1)])
	assert.NotContains(t, a.sent, resources.InstanceName(db, 2), "a pod that is not Ready is not called")
	assert.Equal(t, dbv1.ReasonRestartPending, out.Condition.Reason)
	assert.Equal(t, retryAfter, out.RequeueAfter)
	require.NotNil(t, out.Status)
	require.NotNil(t, out.Status.Configuration)
	assert.Equal(t, []string{"max_connections"}, out.Status.Configuration.PendingRestart)
	assert.Nil(t, out.Status.Configuration.RestartRevision, "one instance has not written the new value yet")

	// the third instance runs and writes them: the revision moves
	require.NoError(t, c.Delete(context.Background(), pod(db, 2, false)))
	require.NoError(t, c.Create(context.Background(), pod(db, 2, true)))
	a.answers[resources.InstanceName(db, 2)] = restart
	out, err = s.Sync(context.Background(), db)
	require.NoError(t, err)
	require.NotNil(t, out.Status.Configuration.RestartRevision)
	assert.NotEmpty(t, *out.Status.Configuration.RestartRevision)

	// the pods' template carries it
	db.Status.Configuration = &dbv1.ConfigurationStatus{RestartRevision: *out.Status.Configuration.RestartRevision}
	assert.Equal(t, &db.Status.Configuration.RestartRevision, s.CurrentStatus(db).Configuration.RestartRevision, "kept when Sync does not run")
}

// TestSyncReportsAnInstanceThatDoesNotAnswer: ConfigurationReady False
// naming it, retried soon.
func TestSyncReportsAnInstanceThatDoesNotAnswer(t *testing.T) {
	db := facettest.Database()
	db.Spec.Replicas = ptr.To[int32](2)
	c := facettest.Client(t, db, pod(db, 0, true), pod(db, 1, true))
	a := &agents{sent: map[string]map[string]string{}, down: map[string]bool{resources.InstanceName(db, 1): true}}
	out, err := (&syncer{client: c, agents: a}).Sync(context.Background(), db)
	require.NoError(t, err)
	assert.Equal(t, metav1.ConditionFalse, out.Condition.Status)
	assert.Equal(t, dbv1.ReasonInstancesUnreachable, out.Condition.Reason)
	assert.Contains(t, out.Condition.Message, resources.InstanceName(db, 1))
	assert.Equal(t, retryAfter, out.RequeueAfter)
	assert.Equal(t, map[string]string{}, a.sent[resources.InstanceName(db, 0)], "an empty spec resets what was set")
}
