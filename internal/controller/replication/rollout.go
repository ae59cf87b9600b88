package replication

import (
	"fmt"
	"slices"
	"strings"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
)

// outdated are the instances below spec.replicas whose pod does not run
// the StatefulSet's template (runsTemplate), highest ordinal first.
func outdated(in Input) []*Instance {
	n := replicas(in.DB)
	var out []*Instance
	for i := len(in.Instances) - 1; i >= 0; i-- {
		inst := &in.Instances[i]
		if inst.Exists && !inst.Terminating && inst.Ordinal < n && !in.runsTemplate(inst) {
			out = append(out, inst)
		}
	}
	return out
}

// runsTemplate says inst's pod runs what the StatefulSet's template says
// as far as only a restart changes it. When the agents take over in place
// (AgentBuild) and both the template and the pod carry a restart
// hash (resources.AnnotationRestartHash), those are compared: another
// agent image alone restarts nothing (docs/design/upgrades.md, part 1).
// Otherwise the pod's revision is compared with the update revision (a
// pod or a StatefulSet without one counts as current).
func (in Input) runsTemplate(inst *Instance) bool {
	if in.AgentBuild != nil && in.RestartHash != "" && inst.RestartHash != "" {
		return inst.RestartHash == in.RestartHash
	}
	return in.UpdateRevision == "" || inst.Revision == "" || inst.Revision == in.UpdateRevision
}

// rollOut is a rollout's step (OnDelete): standbys first, then a
// switchover, then the former primary as a standby; nothing while an
// instance is unhealthy or being deleted.
func rollOut(p *Plan, s *serving) bool {
	old := outdated(s.in)
	if len(old) == 0 {
		return false
	}
	rev := s.in.UpdateRevision
	p.Changing = true
	msg := fmt.Sprintf("%d instance(s) restart on revision %s, standbys first", len(old), rev)
	p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonRollingUpdate, msg)
	unhealthy := s.unhealthy(p.CurrentPrimary)
	if len(unhealthy) > 0 || slices.ContainsFunc(s.in.Instances, func(i Instance) bool { return i.Terminating }) {
		p.Condition.Message += "; waiting for every instance to be healthy: " + strings.Join(unhealthy, "; ")
		return true
	}
	for _, inst := range old {
		if inst.Name != p.CurrentPrimary {
			p.Action = Action{Kind: ActDeletePod, Pod: inst.Name, Why: "rollout to revision " + rev}
			return true
		}
	}
	if s.n == 1 {
		p.Action = Action{Kind: ActDeletePod, Pod: s.prim.Name, Why: "rollout to revision " + rev + " (the only instance)"}
		return true
	}
	if target := bestStandby(s.in.DB, s.in.Instances, s.byName, s.prim, s.in.runsTemplate); target != "" {
		startSwitchover(p, target, "rollout to revision "+rev)
		p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonRollingUpdate, msg+fmt.Sprintf("; switching over to %s before the primary restarts", target))
		return true
	}
	p.Condition.Message += "; no updated standby streams to switch over to"
	return true
}
