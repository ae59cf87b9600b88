package replication

import (
	"fmt"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// upgradeAgents brings an agent of another build to the manager's in
// place (docs/design/upgrades.md): one at a time, standbys first (the
// highest ordinal first), the primary last, only while every instance is
// healthy; PostgreSQL runs on, so ReplicationReady stays as reportHealth
// says, with the step added. An agent that refused the build lately
// (Input.AgentRefused) is left and said, as is one of a newer API level
// (a downgraded manager sends no binary backwards). It decides only when
// there is something to do or to say.
func upgradeAgents(p *Plan, s *serving) bool {
	in := s.in
	if in.AgentBuild == nil || len(s.unhealthy(p.CurrentPrimary)) > 0 {
		return false
	}
	build := in.AgentBuild.Name()
	var standby, primary *Instance
	var notes []string
	for i := len(in.Instances) - 1; i >= 0; i-- {
		inst := &in.Instances[i]
		if inst.Ordinal >= s.n || inst.Agent == nil || inst.Terminating {
			continue
		}
		switch instance.AgentVerdictOf(*inst.Agent, *in.AgentBuild) {
		case instance.AgentNewer:
			notes = append(notes, fmt.Sprintf("the agent of %s (build %s, API level %d) is newer than this manager's build %s: left as it is",
				inst.Name, agentBuild(inst), inst.Agent.Agent.Level, build))
		case instance.AgentUpgrade:
			if why, refused := in.AgentRefused[inst.Name]; refused {
				notes = append(notes, fmt.Sprintf("the agent of %s refused build %s (%s); tried again later", inst.Name, build, why))
				continue
			}
			if inst.Name == p.CurrentPrimary {
				primary = inst
			} else if standby == nil {
				standby = inst
			}
		}
	}
	target := standby
	if target == nil {
		target = primary
	}
	if target == nil && len(notes) == 0 {
		return false
	}
	reportHealth(p, s)
	if target != nil {
		p.Changing = true
		p.Action = Action{Kind: ActUpgradeAgent, Pod: target.Name,
			Why: fmt.Sprintf("its agent runs build %s, the manager %s", agentBuild(target), build)}
		p.Condition.Message += fmt.Sprintf("; upgrading the agent of %s in place to build %s (PostgreSQL runs on)", target.Name, build)
	}
	for _, n := range notes {
		p.Condition.Message += "; " + n
	}
	return true
}

// agentBuild names the build the agent of inst reports.
func agentBuild(inst *Instance) string {
	return agentapi.BuildName(inst.Agent.Agent.Version, inst.Agent.Agent.SHA256)
}
