package replication

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// TestUpgradeAgents: the agents of another build are brought to the
// manager's in place, one at a time, the standbys first (highest ordinal
// first) and the primary last, only while every instance is healthy;
// ReplicationReady stays True and says so. A refused agent is left (and
// said) until its refusal ages out, an agent of a newer API level is left
// alone, an agent that reports no build (it predates the takeover) is the
// rollout's, and without a build to bring (AgentBuild nil) nothing is
// sent.
func TestUpgradeAgents(t *testing.T) {
	db := facettest.Database()
	db.Spec.Replicas = ptr.To[int32](3)
	db.Status.Replication = &dbv1.ReplicationStatus{CurrentPrimary: "orders-0", TargetPrimary: "orders-0"}
	built := func(a *agentapi.Status, version string, level int) *agentapi.Status {
		a.Agent = &agentapi.BuildInfo{Version: version, Level: level}
		return a
	}
	healthy := func(v0, v1, v2 string) []Instance {
		return []Instance{
			inst(0, built(primaryAt("orders-0", "0/10"), v0, agentapi.Level), ""),
			inst(1, built(standbyAt("orders-1", "0/10"), v1, agentapi.Level), ""),
			inst(2, built(standbyAt("orders-2", "0/10"), v2, agentapi.Level), ""),
		}
	}
	decide := func(insts []Instance, refused map[string]string) Plan {
		return Decide(Input{DB: db, Instances: insts, UpdateRevision: "r1", Now: now,
			AgentBuild: &instance.AgentBinary{Version: "v2"}, AgentRefused: refused})
	}

	p := decide(healthy("v1", "v1", "v1"), nil)
	assert.Equal(t, Action{Kind: ActUpgradeAgent, Pod: "orders-2", Why: "its agent runs build v1, the manager v2"}, p.Action, "the highest standby first")
	assert.Equal(t, metav1.ConditionTrue, p.Condition.Status)
	assert.Equal(t, dbv1.ReasonReplicating, p.Condition.Reason)
	assert.Contains(t, p.Condition.Message, "upgrading the agent of orders-2 in place to build v2 (PostgreSQL runs on)")
	assert.True(t, p.Changing)

	assert.Equal(t, "orders-1", decide(healthy("v1", "v1", "v2"), nil).Action.Pod, "then the next standby")
	assert.Equal(t, "orders-0", decide(healthy("v1", "v2", "v2"), nil).Action.Pod, "the primary last")
	p = decide(healthy("v2", "v2", "v2"), nil)
	assert.Equal(t, ActNone, p.Action.Kind, "every agent current")
	assert.NotContains(t, p.Condition.Message, "agent")

	p = decide(healthy("v1", "v1", "v1"), map[string]string{"orders-2": "the check of the new binary failed"})
	assert.Equal(t, "orders-1", p.Action.Pod, "a refused agent is left for now")
	assert.Contains(t, p.Condition.Message, "the agent of orders-2 refused build v2 (the check of the new binary failed); tried again later")

	insts := healthy("v1", "v1", "v1")
	insts[2].Agent.Agent.Level = agentapi.Level + 1
	p = decide(insts, nil)
	assert.Equal(t, "orders-1", p.Action.Pod, "an agent of a newer level is not sent a build backwards")
	assert.Contains(t, p.Condition.Message, "the agent of orders-2 (build v1, API level 2) is newer than this manager's build v2: left as it is")

	insts = healthy("v1", "v1", "v1")
	insts[2].Agent.Agent = nil
	assert.Equal(t, "orders-1", decide(insts, nil).Action.Pod, "an agent without a build predates the takeover: it restarts to change")

	insts = healthy("v1", "v1", "v1")
	insts[1].Agent.WALReceiver, insts[1].Agent.ReceivedLSN, insts[1].Agent.ReplayedLSN = "", "0/1", "0/1"
	p = decide(insts, nil)
	assert.Equal(t, ActNone, p.Action.Kind, "nothing while an instance is unhealthy: %s", p.Condition.Message)

	p = Decide(Input{DB: db, Instances: healthy("v1", "v1", "v1"), UpdateRevision: "r1", Now: now})
	assert.Equal(t, ActNone, p.Action.Kind, "no build to bring")
}
