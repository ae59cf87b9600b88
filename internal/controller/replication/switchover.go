package replication

import (
	"fmt"
	"time"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// maxSwitchoverLag is the largest replay lag of a switchover target: the
// old primary takes no writes until the target replayed all of it.
const maxSwitchoverLag = 64 << 20

// switchover is what the rules of a running switchover read: the view,
// the old primary and the target (nil when no such instance).
type switchover struct {
	*view
	old, target *Instance
}

// decideSwitchover: targetPrimary differs from currentPrimary
// (phaseSwitchingOver). Every step is derived from status and what the
// agents report, so a manager that stopped anywhere resumes at the right
// step. Once the old primary was demoted, the wait for the target is
// bounded (transitionTimeout): then the switchover falls back (fallBack).
func decideSwitchover(p *Plan, v *view) {
	p.Changing = true
	s := &switchover{view: v, old: v.byName[p.CurrentPrimary], target: v.byName[p.TargetPrimary]}
	targetPrimary := s.target != nil && s.target.reportsPrimary()
	oldPrimary := s.old != nil && s.old.reportsPrimary()
	switch {
	case targetPrimary && !oldPrimary:
		finishSwitchover(p, v)
	case targetPrimary && oldPrimary:
		switchoverMsg(p, "both report being the primary; neither is selected by the read-write Service")
	case oldPrimary && p.SwitchoverLSN == "" && s.old.Agent.State != agentapi.StateRunning:
		// A demote runs (a manager stopped during the call): its
		// standbys do not stream meanwhile, so this is no reason to give
		// up.
		switchoverMsg(p, "waiting for %s, which is %s", p.CurrentPrimary, s.old.Agent.State)
	case oldPrimary && p.SwitchoverLSN == "":
		demoteOrGiveUp(p, s)
	case oldPrimary:
		// Demoted, yet reporting primary still (it restarts): ask again.
		p.Action = Action{Kind: ActDemote, Pod: p.CurrentPrimary, From: p.CurrentPrimary}
		switchoverMsg(p, "%s still reports being the primary; demoting it", p.CurrentPrimary)
	case p.SwitchoverLSN == "":
		recordDemotedLSN(p, s)
	default:
		promoteReplayed(p, s)
	}
}

// switchoverMsg sets the condition of a running switchover.
func switchoverMsg(p *Plan, format string, args ...any) {
	p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonSwitchingOver,
		fmt.Sprintf("switching over from %s to %s: ", p.CurrentPrimary, p.TargetPrimary)+fmt.Sprintf(format, args...))
}

// wait says what the demoted switchover waits for, and falls back once it
// has waited transitionTimeout.
func (s *switchover) wait(p *Plan, why string) {
	switchoverMsg(p, "waiting for %s", why)
	in, target := s.in, s.target
	if in.SwitchoverWaitSince.IsZero() || (target != nil && target.Agent != nil && target.Agent.State == agentapi.StatePromoting) {
		return
	}
	waited := in.Now.Sub(in.SwitchoverWaitSince)
	if waited < transitionTimeout {
		p.Condition.Message += fmt.Sprintf(" (the switchover falls back in %s)", (transitionTimeout - waited).Round(100*time.Millisecond))
		return
	}
	fallBack(p, s.view, why)
}

// finishSwitchover: the target reports being the primary, the old one no
// longer does.
func finishSwitchover(p *Plan, v *view) {
	p.Action = Action{Kind: ActFinishSwitchover, Pod: p.TargetPrimary, From: p.CurrentPrimary, LSN: p.SwitchoverLSN}
	p.CurrentPrimary, p.SwitchoverLSN = p.TargetPrimary, ""
	switchoverMsg(p, "%s is the primary", p.TargetPrimary)
	if v.in.DB.Annotations[dbv1.AnnotationSwitchoverTo] == "" {
		p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonSwitchingOver, fmt.Sprintf("%s is the primary", p.CurrentPrimary))
	}
}

// demoteOrGiveUp demotes the old primary once the target streams; nothing
// happened yet otherwise: the switchover is given up rather than leave
// the Database without a primary.
func demoteOrGiveUp(p *Plan, s *switchover) {
	if target := s.target; target == nil || !target.streaming() {
		why := "it does not exist"
		if target != nil {
			why = target.problem()
			if why == "" {
				why = "it is not a streaming standby"
			}
		}
		p.Action = Action{Kind: ActAbortSwitchover, Pod: p.TargetPrimary, From: p.CurrentPrimary, Why: why}
		p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonSwitchoverRefused, fmt.Sprintf(
			"the switchover from %s to %s was given up before the primary was demoted: %s is not ready to take over: %s",
			p.CurrentPrimary, p.TargetPrimary, p.TargetPrimary, why))
		if s.in.DB.Annotations[dbv1.AnnotationSwitchoverTo] != "" {
			p.Condition.Message += fmt.Sprintf(" (annotation %s)", dbv1.AnnotationSwitchoverTo)
		}
		p.TargetPrimary = p.CurrentPrimary
		return
	}
	p.Action = Action{Kind: ActDemote, Pod: p.CurrentPrimary, From: p.CurrentPrimary}
	switchoverMsg(p, "demoting %s", p.CurrentPrimary)
}

// recordDemotedLSN: demoted, but the manager stopped before it recorded
// the shutdown position: the old primary's own end of WAL is it.
func recordDemotedLSN(p *Plan, s *switchover) {
	old := s.old
	if old == nil || old.Agent == nil || old.Agent.Role != agentapi.RoleReplica {
		s.wait(p, fmt.Sprintf("the demoted %s to report its last position", p.CurrentPrimary))
		return
	}
	lsn := old.Agent.ReplayedLSN
	if a, ok := parseLSN(old.Agent.ReceivedLSN); ok {
		if b, ok := parseLSN(lsn); !ok || a > b {
			lsn = old.Agent.ReceivedLSN
		}
	}
	if lsn == "" {
		s.wait(p, fmt.Sprintf("the demoted %s to report its last position", p.CurrentPrimary))
		return
	}
	p.SwitchoverLSN = lsn
	p.Action = Action{Kind: ActRecordLSN, Pod: p.CurrentPrimary, LSN: lsn}
	switchoverMsg(p, "%s was demoted at %s", p.CurrentPrimary, lsn)
}

// promoteReplayed promotes the target once it answers as a standby that
// replayed up to the switchover LSN.
func promoteReplayed(p *Plan, s *switchover) {
	target := s.target
	if target == nil || target.Agent == nil || target.Agent.Role != agentapi.RoleReplica {
		why := "answer as a standby"
		if target != nil && !target.Exists {
			why += " (its pod does not exist)"
		} else if target != nil && target.Agent == nil && target.Err != "" {
			why += " (its agent does not answer: " + conditions.Quote(target.Err, 120) + ")"
		}
		s.wait(p, fmt.Sprintf("%s to %s", p.TargetPrimary, why))
		return
	}
	if target.Agent.State == agentapi.StatePromoting {
		// A promotion that outlasted its call goes on in the agent,
		// which would answer another promote 409 (busy).
		s.wait(p, fmt.Sprintf("%s to finish its promotion", p.TargetPrimary))
		return
	}
	want, _ := parseLSN(p.SwitchoverLSN)
	have, ok := parseLSN(target.Agent.ReplayedLSN)
	if !ok || have < want {
		s.wait(p, fmt.Sprintf("%s to replay up to %s (it replayed %s)", p.TargetPrimary, p.SwitchoverLSN, target.Agent.ReplayedLSN))
		return
	}
	p.Action = Action{Kind: ActPromote, Pod: p.TargetPrimary, From: p.CurrentPrimary, LSN: p.SwitchoverLSN}
	switchoverMsg(p, "promoting %s, which replayed up to %s", p.TargetPrimary, p.SwitchoverLSN)
}

func startSwitchover(p *Plan, target, why string) {
	p.TargetPrimary = target
	p.SwitchoverLSN = ""
	p.Changing = true
	p.Action = Action{Kind: ActStartSwitchover, Pod: target, From: p.CurrentPrimary, Why: why}
	p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonSwitchingOver,
		fmt.Sprintf("switching over from %s to %s (%s)", p.CurrentPrimary, target, why))
}

// switchoverRefusal says why target cannot become the primary, "" when it
// can.
func switchoverRefusal(db *dbv1.Database, byName map[string]*Instance, prim *Instance, target string) string {
	ord, isInstance := resources.InstanceOrdinal(db, target)
	inst := byName[target]
	switch {
	case !isInstance || inst == nil:
		return "it is not an instance of this Database"
	case ord >= replicas(db):
		return fmt.Sprintf("its ordinal %d is not below spec.replicas %d", ord, replicas(db))
	}
	if why := inst.problem(); why != "" {
		return why
	}
	if !inst.streaming() {
		return "it is not a streaming standby"
	}
	if inst.Agent.SystemID != prim.Agent.SystemID {
		return fmt.Sprintf("its system identifier %s is not the primary's %s", inst.Agent.SystemID, prim.Agent.SystemID)
	}
	if inst.Agent.Timeline != prim.Agent.Timeline {
		return fmt.Sprintf("it is on timeline %d, the primary on %d", inst.Agent.Timeline, prim.Agent.Timeline)
	}
	if lag, ok := lagBytes(prim.Agent, inst.Agent); !ok || lag > maxSwitchoverLag {
		return fmt.Sprintf("it lags %d bytes behind the primary (at most %d)", lag, maxSwitchoverLag)
	}
	return ""
}

// bestStandby is the streaming standby with an ordinal below
// spec.replicas (and current, when current is set) that lags least.
func bestStandby(db *dbv1.Database, insts []Instance, byName map[string]*Instance, prim *Instance, current func(*Instance) bool) string {
	best, bestLag := "", int64(-1)
	for _, inst := range insts {
		if inst.Name == prim.Name || (current != nil && !current(&inst)) {
			continue
		}
		if switchoverRefusal(db, byName, prim, inst.Name) != "" {
			continue
		}
		lag, _ := lagBytes(prim.Agent, inst.Agent)
		if best == "" || better(&inst, byName[best], lag, bestLag) {
			best, bestLag = inst.Name, lag
		}
	}
	return best
}

// better: a standby on a node that stays beats one on a node being
// drained (it would be evicted next); then the smaller lag wins.
func better(inst, best *Instance, lag, bestLag int64) bool {
	if c := staysFirst(inst, best); c != 0 {
		return c < 0
	}
	return lag < bestLag
}
