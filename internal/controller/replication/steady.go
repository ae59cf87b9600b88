package replication

import (
	"fmt"
	"strings"
	"time"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
)

// serving is what the rules of a primary that serves read: the view and
// the primary.
type serving struct {
	*view
	prim *Instance
	// drainBlocked says why the primary's node waits to be drained, ""
	// when it does not (leaveDrainingNode).
	drainBlocked string
}

// servingRule is one rule of a serving primary: it returns true when it
// decided, and the rules after it are not asked.
type servingRule func(p *Plan, s *serving) bool

// The rules of phaseSteady and phaseRollingUpdate, in priority order: the
// last one always decides.
var (
	steadyRules        = []servingRule{cloneStandby, rejoinDiverged, askedSwitchover, leaveDrainingNode, handOverOnScaleDown, upgradeAgents, reportHealth}
	rollingUpdateRules = []servingRule{cloneStandby, rejoinDiverged, askedSwitchover, leaveDrainingNode, handOverOnScaleDown, rollOut, reportHealth}
)

// decideServing: a primary is recorded, serves, and no switchover runs.
// The primary keeps its slots and synchronous set (EnsureSQL), and the
// first of rules that decides makes the step.
func decideServing(p *Plan, v *view, rules []servingRule) {
	s := &serving{view: v, prim: v.byName[p.CurrentPrimary]}
	p.TargetPrimary = p.CurrentPrimary
	keepPrimary(p, s)
	for _, rule := range rules {
		if rule(p, s) {
			return
		}
	}
}

// keepPrimary: the slots of the standbys that should exist, and the
// synchronous replication the primary runs with.
func keepPrimary(p *Plan, s *serving) {
	for _, inst := range s.in.Instances {
		if inst.Ordinal < s.n && inst.Name != p.CurrentPrimary {
			p.Slots = append(p.Slots, agentapi.SlotName(inst.Name))
		}
	}
	p.EnsureSQL = true
	p.WantSynchronous = synchronousFor(s.in.DB, s.in.Instances, p.CurrentPrimary)
	p.SynchronousRecord, p.SynchronousPending = synchronousRecord(p.Synchronous, p.WantSynchronous, s.in.SyncApplied, s.in.Instances, s.prim)
}

// cloneable: a standby whose agent waits with an empty data directory.
func cloneable(inst *Instance) bool {
	return inst.Agent != nil && inst.Agent.State == agentapi.StateWaiting && inst.Agent.DataEmpty && !inst.Terminating
}

// cloneStandby clones the first standby to create from the primary.
func cloneStandby(p *Plan, s *serving) bool {
	for i := range s.in.Instances {
		inst := &s.in.Instances[i]
		if inst.Ordinal >= s.n || inst.Name == p.CurrentPrimary || !cloneable(inst) {
			continue
		}
		p.Action = Action{Kind: ActBootstrapClone, Pod: inst.Name, Why: "its data directory is empty"}
		p.Changing = true
		p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonBootstrapping, fmt.Sprintf("cloning standby %s from the primary %s", p.Action.Pod, p.CurrentPrimary))
		return true
	}
	return false
}

// rejoinDiverged rewinds a standby that cannot follow the primary onto
// its timeline (divergedStandby).
func rejoinDiverged(p *Plan, s *serving) bool {
	d := divergedStandby(s.in, s.prim)
	if d == nil {
		return false
	}
	prim := s.prim
	p.Changing = true
	p.Action = Action{Kind: ActRejoin, Pod: d.Name, Why: fmt.Sprintf(
		"it is on timeline %d, the primary %s on %d, and has not streamed for %s since the failover", d.Agent.Timeline, prim.Name, prim.Agent.Timeline, rejoinAfter)}
	p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonInstanceUnhealthy, fmt.Sprintf(
		"%s cannot follow the primary %s onto timeline %d (it received WAL of the lost primary the new one never had): rewinding it (pg_rewind)",
		d.Name, prim.Name, prim.Agent.Timeline))
	return true
}

// askedSwitchover: a switchover the user asked for (the annotation). An
// annotation that names the primary is removed, and does not decide: the
// rules after it may still act (the removal then waits).
func askedSwitchover(p *Plan, s *serving) bool {
	target, ok := s.in.DB.Annotations[dbv1.AnnotationSwitchoverTo]
	if !ok {
		return false
	}
	if target == p.CurrentPrimary {
		p.Action = Action{Kind: ActRemoveAnnotation, Pod: target, Why: "it is the primary"}
		return false
	}
	if why := switchoverRefusal(s.in.DB, s.byName, s.prim, target); why != "" {
		p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonSwitchoverRefused, fmt.Sprintf(
			"annotation %s names %s, which cannot become the primary: %s; the primary stays %s",
			dbv1.AnnotationSwitchoverTo, target, why, p.CurrentPrimary))
		return true
	}
	startSwitchover(p, target, "annotation "+dbv1.AnnotationSwitchoverTo)
	return true
}

// handOverOnScaleDown: a primary that scaling removes hands over first.
func handOverOnScaleDown(p *Plan, s *serving) bool {
	prim, n := s.prim, s.n
	if prim.Ordinal < n {
		return false
	}
	if target := bestStandby(s.in.DB, s.in.Instances, s.byName, prim, nil); target != "" {
		startSwitchover(p, target, fmt.Sprintf("spec.replicas is %d, so %s must go", n, prim.Name))
		return true
	}
	p.Changing = true
	p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonInstanceUnhealthy, fmt.Sprintf(
		"spec.replicas is %d, so the primary %s must hand over first, and no standby with a lower ordinal streams from it", n, prim.Name))
	return true
}

// reportHealth says what is wrong, or that all replicate; it always
// decides.
func reportHealth(p *Plan, s *serving) bool {
	t := dbv1.ConditionReplicationReady
	if p.Action.Kind == ActRemoveAnnotation {
		p.Changing = true
	}
	if unhealthy := s.unhealthy(p.CurrentPrimary); len(unhealthy) > 0 {
		p.Changing = true
		p.Condition = conditions.False(t, dbv1.ReasonInstanceUnhealthy, strings.Join(unhealthy, "; "))
		return true
	}
	standbys := max(0, s.n-1)
	p.Condition = conditions.True(t, dbv1.ReasonReplicating, fmt.Sprintf("%s is the primary; %d standby(s) stream from it", p.CurrentPrimary, standbys))
	if s.drainBlocked != "" {
		p.Condition.Message += "; " + s.drainBlocked
		p.Changing = true
	}
	return true
}

// unhealthy says what is wrong with the instances below spec.replicas: a
// full data volume (the primary's too), a standby being created, a
// standby's problem.
func (s *serving) unhealthy(primary string) []string {
	var out []string
	for _, inst := range s.in.Instances {
		if inst.Agent != nil && inst.Agent.VolumeFull && inst.Ordinal < s.n {
			role := "standby"
			if inst.Name == primary {
				role = "primary"
			}
			out = append(out, fmt.Sprintf(
				"the data volume of the %s %s is full (%d bytes free): writes fail until spec.storage.size grows or space is freed; no failover (a standby's volume is no larger)",
				role, inst.Name, inst.Agent.VolumeAvailableBytes))
		}
	}
	for i := range s.in.Instances {
		inst := &s.in.Instances[i]
		if inst.Ordinal >= s.n || inst.Name == primary {
			continue
		}
		if cloneable(inst) {
			out = append(out, fmt.Sprintf("%s is being created", inst.Name))
		} else if why := inst.problem(); why != "" {
			out = append(out, fmt.Sprintf("%s: %s", inst.Name, why))
		}
	}
	return out
}

// rejoinAfter is how long after a failover a standby behind the new
// primary's timeline may take to follow it before it is rewound: a
// standby that streams switches timelines within a second or two.
const rejoinAfter = 20 * time.Second

// divergedStandby is a running standby that, rejoinAfter after the last
// failover finished, is still on an older timeline than the primary and
// does not stream: it received WAL of the lost primary that the promoted
// one never had (a frozen primary's walsender woke before its agent
// fenced it), so PostgreSQL cannot follow the new timeline until the
// standby is rewound. nil when there is none.
func divergedStandby(in Input, prim *Instance) *Instance {
	st := in.DB.Status.Replication
	if st == nil || st.LastFailover == nil || st.LastFailover.FinishedAt == nil ||
		in.Now.Sub(st.LastFailover.FinishedAt.Time) < rejoinAfter || prim.Agent == nil {
		return nil
	}
	for i := range in.Instances {
		inst := &in.Instances[i]
		a := inst.Agent
		if inst.Name == prim.Name || a == nil || inst.Terminating || inst.Ordinal >= replicas(in.DB) {
			continue
		}
		if a.Role == agentapi.RoleReplica && a.State == agentapi.StateRunning && a.WALReceiver != "streaming" && a.Timeline < prim.Agent.Timeline {
			return inst
		}
	}
	return nil
}
