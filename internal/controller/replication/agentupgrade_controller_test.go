package replication

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// newAgentImage plays a manager upgrade on f: the StatefulSet's template
// has a new agent image (a new update revision) but the same restart
// hash, which every running pod carries.
func newAgentImage(t *testing.T, f *fixture) {
	ctx := context.Background()
	sts := &appsv1.StatefulSet{}
	require.NoError(t, f.c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders"}, sts))
	sts.Spec.Template.Annotations = map[string]string{resources.AnnotationRestartHash: "h1"}
	require.NoError(t, f.c.Update(ctx, sts))
	sts.Status.UpdateRevision = "r2"
	require.NoError(t, f.c.Status().Update(ctx, sts))
	f.revision = "r2"
	pods := &corev1.PodList{}
	require.NoError(t, f.c.List(ctx, pods))
	for i := range pods.Items {
		p := &pods.Items[i]
		p.Annotations = map[string]string{resources.AnnotationRestartHash: "h1"}
		require.NoError(t, f.c.Update(ctx, p))
	}
}

// TestAgentsUpgradedInPlace: after a manager upgrade (a new agent image in
// the template, the agents reporting build v1, the manager's build v2),
// every agent is sent v2 and replaces itself in place, the standbys first
// and the primary last, one per reconcile; no pod is deleted and no
// switchover runs, and ReplicationReady stays True throughout.
func TestAgentsUpgradedInPlace(t *testing.T) {
	f, s := converged(t, 3)
	for _, p := range []string{"orders-0", "orders-1", "orders-2"} {
		f.agents.SetAgentVersion(f.db, p, "v1", false)
	}
	newAgentImage(t, f)
	s.binary = &instance.AgentBinary{Path: "/proc/self/exe", Version: "v2"}
	f.eventsText()
	before := len(f.agents.Calls())
	for range 6 {
		f.step(s)
		assert.Equal(t, dbv1.ReasonReplicating, f.condition().Reason, f.condition().Message)
	}
	assert.Equal(t, []string{"push-binary orders-2 v2", "push-binary orders-1 v2", "push-binary orders-0 v2"}, f.agents.Calls()[before:],
		"the standbys first, the primary last, nothing else")
	assert.Empty(t, f.deleted, "no pod restarted")
	assert.Equal(t, "orders-0", f.get().Status.Replication.CurrentPrimary, "no switchover")
	events := f.eventsText()
	assert.Contains(t, events, "Normal AgentUpgraded The agent of orders-2 replaces itself in place: build v1 to v2; PostgreSQL runs on")
	assert.Contains(t, events, "Normal AgentUpgraded The agent of orders-0 replaces itself in place: build v1 to v2; PostgreSQL runs on")
	assert.NotContains(t, f.condition().Message, "upgrading", "done: %s", f.condition().Message)
}

// TestAgentUpgradeRefused: an agent that refuses the build (its check
// failed) is told in a Warning Event and in ReplicationReady, not sent the
// build again at once, and does not hold up the others; without the
// takeover (no binary) the same new template rolls the pods out instead.
func TestAgentUpgradeRefused(t *testing.T) {
	f, s := converged(t, 3)
	f.agents.SetAgentVersion(f.db, "orders-0", "v1", false)
	f.agents.SetAgentVersion(f.db, "orders-1", "v1", false)
	f.agents.SetAgentVersion(f.db, "orders-2", "v1", true)
	newAgentImage(t, f)
	s.binary = &instance.AgentBinary{Path: "/proc/self/exe", Version: "v2"}
	f.eventsText()
	before := len(f.agents.Calls())
	f.run(s, 6)
	assert.Equal(t, []string{"push-binary orders-2 v2", "push-binary orders-1 v2", "push-binary orders-0 v2"}, f.agents.Calls()[before:],
		"the refusing agent once, then the others")
	assert.Contains(t, f.eventsText(), "Warning AgentUpgradeRefused The agent of orders-2 did not take build v2: the check of the new binary failed; sent again in 2m0s")
	c := f.condition()
	assert.Equal(t, dbv1.ReasonReplicating, c.Reason)
	assert.Contains(t, c.Message, "the agent of orders-2 refused build v2 (the check of the new binary failed); tried again later")
	assert.Empty(t, f.deleted)

	g, t2 := converged(t, 2)
	newAgentImage(t, g)
	g.run(t2, 12)
	assert.Equal(t, []string{"orders-1", "orders-0"}, g.deleted, "without the takeover the new template restarts every pod, in order")
}
