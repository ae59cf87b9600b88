package replication

import (
	"fmt"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// decideBootstrap: no primary is recorded yet (phaseBootstrapping). The
// first rule that applies decides.
func decideBootstrap(p *Plan, v *view) {
	p.Changing = true
	switch {
	case recordRunningPrimary(p, v):
	case refuseExistingData(p, v):
	case waitForSilentAgent(p, v):
	default:
		initdbFirst(p, v)
	}
}

// recordRunningPrimary: a primary exists (a manager that lost its status,
// or one that bootstrapped before it could record it): record it.
func recordRunningPrimary(p *Plan, v *view) bool {
	if len(v.primaries) != 1 {
		return false
	}
	p.CurrentPrimary, p.TargetPrimary = v.primaries[0], v.primaries[0]
	p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonBootstrapping, fmt.Sprintf("%s is the primary", v.primaries[0]))
	return true
}

// refuseExistingData: an instance has data but none reports being the
// primary: dbkeeper does not pick one by guess.
func refuseExistingData(p *Plan, v *view) bool {
	for _, inst := range v.in.Instances {
		if inst.Agent != nil && !inst.Agent.DataEmpty {
			p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonInstanceUnhealthy, fmt.Sprintf(
				"no instance reports being the primary, and %s has data (%s, role %q): dbkeeper does not pick a primary by guess",
				inst.Name, inst.Agent.State, inst.Agent.Role))
			return true
		}
	}
	return false
}

// waitForSilentAgent: an agent that does not answer may have data.
func waitForSilentAgent(p *Plan, v *view) bool {
	for _, inst := range v.in.Instances {
		if inst.Exists && inst.Agent == nil && inst.Err != "" {
			p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonBootstrapping, fmt.Sprintf(
				"waiting for the agent of %s, which does not answer, to tell whether it has data: %s", inst.Name, conditions.Quote(inst.Err, 120)))
			return true
		}
	}
	return false
}

// initdbFirst creates the first primary on ordinal 0 once its agent waits
// with an empty data directory.
func initdbFirst(p *Plan, v *view) {
	t := dbv1.ConditionReplicationReady
	first := v.byName[resources.InstanceName(v.in.DB, 0)]
	switch {
	case first == nil || !first.Exists || first.Agent == nil:
		p.Condition = conditions.False(t, dbv1.ReasonBootstrapping, fmt.Sprintf("waiting for pod %s and its agent", resources.InstanceName(v.in.DB, 0)))
	case first.Agent.State == agentapi.StateWaiting && first.Agent.DataEmpty:
		p.TargetPrimary = first.Name
		p.Action = Action{Kind: ActBootstrapInitdb, Pod: first.Name, Why: "no instance has data"}
		p.Condition = conditions.False(t, dbv1.ReasonBootstrapping, fmt.Sprintf("creating the first primary %s (initdb)", first.Name))
	default:
		p.Condition = conditions.False(t, dbv1.ReasonBootstrapping, fmt.Sprintf("%s is %s", first.Name, first.Agent.State))
	}
}
