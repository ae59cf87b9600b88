package replication

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
)

// failover is what the rules of a running failover read: the view, the
// lost primary and the target (nil when no such instance), whether the
// target runs as the primary, and why it cannot be promoted now
// (targetAbsent).
type failover struct {
	*view
	old, target *Instance
	promoted    bool
	absent      string
}

// decideFailover: a failover runs (phaseFailingOver). No demote (the old
// primary is lost): the target is asked to promote (Failover: it takes
// the lease over when it may) on every poll until it reports being the
// primary. An old primary that comes back holding the lease first ends
// it; another instance running as the primary with the lease becomes the
// target; a target gone for transitionTimeout since the failover started
// is replaced by the best remaining candidate (replaceTarget). The first
// rule that applies decides.
func decideFailover(p *Plan, v *view) {
	p.Changing = true
	p.PrimaryLostSince = v.in.DB.Status.Replication.PrimaryLostSince
	f := &failover{view: v, old: v.byName[p.CurrentPrimary], target: v.byName[p.TargetPrimary]}
	t := f.target
	f.promoted = t != nil && t.Agent != nil && t.Agent.Role == agentapi.RolePrimary && t.Agent.State == agentapi.StateRunning
	f.absent = targetAbsent(t)
	switch {
	case abortForOldPrimary(p, f):
	case finishFailover(p, f):
	case retargetToLeaseHolder(p, f):
	case replaceAbsentTarget(p, f):
	case waitForTarget(p, f):
	default:
		promoteTarget(p, f)
	}
}

// failoverMsg sets the condition of a running failover.
func failoverMsg(p *Plan, format string, args ...any) {
	p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonFailingOver,
		fmt.Sprintf("failing over from %s to %s: ", p.CurrentPrimary, p.TargetPrimary)+fmt.Sprintf(format, args...))
}

// abortForOldPrimary: the old primary came back as a healthy primary
// holding the lease before the target was promoted.
func abortForOldPrimary(p *Plan, f *failover) bool {
	old := f.old
	if f.promoted || old == nil || !old.healthyPrimary() || !old.PodReady || (old.Agent.Lease != nil && !old.Agent.Lease.Held) {
		return false
	}
	p.Action = Action{Kind: ActAbortFailover, Pod: p.TargetPrimary, From: p.CurrentPrimary,
		Why: fmt.Sprintf("%s came back as a healthy primary holding the lease before %s was promoted", p.CurrentPrimary, p.TargetPrimary)}
	p.LastFailover.Reason += "; aborted: " + p.Action.Why
	p.LastFailover.AbortedAt = &metav1.Time{Time: f.in.Now}
	p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonInstanceUnhealthy, fmt.Sprintf(
		"the failover from %s to %s was aborted: %s; %s stays the primary", p.CurrentPrimary, p.TargetPrimary, p.Action.Why, p.CurrentPrimary))
	p.TargetPrimary, p.PrimaryLostSince = p.CurrentPrimary, nil
	return true
}

// finishFailover: the target runs as the primary.
func finishFailover(p *Plan, f *failover) bool {
	if !f.promoted {
		return false
	}
	now := metav1.Time{Time: f.in.Now}
	p.LastFailover.FinishedAt = &now
	p.Action = Action{Kind: ActFinishFailover, Pod: p.TargetPrimary, From: p.CurrentPrimary, LSN: f.target.Agent.CurrentLSN}
	p.CurrentPrimary, p.PrimaryLostSince = p.TargetPrimary, nil
	p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonFailingOver,
		fmt.Sprintf("%s is the primary after a failover from %s", p.CurrentPrimary, p.LastFailover.From))
	return true
}

// retargetToLeaseHolder: another instance runs as the primary holding the
// lease: it becomes the target.
func retargetToLeaseHolder(p *Plan, f *failover) bool {
	for _, name := range f.primaries {
		if h := f.byName[name]; name != p.CurrentPrimary && name != p.TargetPrimary && h.healthyPrimary() && h.Agent.Lease != nil && h.Agent.Lease.Held {
			startFailover(p, f.in, h, h.Agent.CurrentLSN, p.LastFailover.FromLSN,
				fmt.Sprintf("%s; %s holds the primary lease and runs as the primary", p.LastFailover.Reason, name))
			p.Action.EventReason = ReasonFailoverRetargeted
			return true
		}
	}
	return false
}

// replaceAbsentTarget: the target has been gone for transitionTimeout
// since the failover started.
func replaceAbsentTarget(p *Plan, f *failover) bool {
	if f.absent == "" || f.in.Now.Sub(p.LastFailover.StartedAt.Time) < transitionTimeout {
		return false
	}
	failoverMsg(p, "%s cannot be promoted: %s", p.TargetPrimary, f.absent)
	replaceTarget(p, f.view, f.absent)
	return true
}

// waitForTarget: the target has no pod or no answer yet.
func waitForTarget(p *Plan, f *failover) bool {
	if t := f.target; t != nil && t.Exists && t.Agent != nil {
		return false
	}
	failoverMsg(p, "waiting for %s: %s (another standby replaces it in %s)", p.TargetPrimary, f.absent,
		untilTransitionTimeout(f.in.Now, p.LastFailover.StartedAt.Time))
	return true
}

// promoteTarget asks the target to promote once it holds the primary
// lease.
func promoteTarget(p *Plan, f *failover) {
	p.Action = Action{Kind: ActPromote, Pod: p.TargetPrimary, From: p.CurrentPrimary, Failover: true}
	state := string(f.target.Agent.State)
	if l := f.target.Agent.Lease; l != nil && l.Error != "" {
		state += ", lease: " + conditions.Quote(l.Error, 120)
	}
	failoverMsg(p, "promoting %s (%s) once it holds the primary lease", p.TargetPrimary, state)
}

// startFailover records the failover from the current primary to target,
// which is at pos (status first: the target is promoted only once it is
// recorded).
func startFailover(p *Plan, in Input, target *Instance, pos, from, reason string) {
	lack := lacks(from, pos)
	p.LastFailover = &dbv1.FailoverStatus{From: p.CurrentPrimary, To: target.Name, Reason: reason,
		StartedAt: metav1.Time{Time: in.Now}, FromLSN: from, PromotedLSN: pos, LostBytes: lack}
	p.TargetPrimary = target.Name
	p.SwitchoverLSN = ""
	p.Action = Action{Kind: ActStartFailover, Pod: target.Name, From: p.CurrentPrimary, Why: reason}
	p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonFailingOver, fmt.Sprintf(
		"failing over from %s to %s: %s; %s received %s, the lost primary was last seen at %s (%d bytes it lacks)",
		p.CurrentPrimary, target.Name, reason, target.Name, orUnknown(pos), orUnknown(from), lack))
}

// replaceTarget replaces the target of a running failover that has been
// gone (absent says how) for transitionTimeout since the failover started
// with the best of the remaining candidates, or says why none can be.
func replaceTarget(p *Plan, v *view, absent string) {
	in := v.in
	lost, gone := p.CurrentPrimary, p.TargetPrimary
	f := p.LastFailover
	c := chooseTarget(in, p.SystemID, chooseArgs{exclude: []string{lost, gone}, from: f.FromLSN, fromTimeline: primaryTimeline(in.DB, v.byName[lost], lost)})
	if c.refusal != "" {
		p.Condition.Message += fmt.Sprintf("; it has been gone for more than %s, and no other standby can replace it: %s", transitionTimeout, c.refusal)
		return
	}
	why := fmt.Sprintf("%s did not become the primary within %s of the failover's start (%s)", gone, transitionTimeout, absent)
	if in.Detached == nil {
		detachFirst(p, in, []string{lost, gone}, fmt.Sprintf("failing over from %s: %s", lost, why))
		return
	}
	reason := fmt.Sprintf("%s; %s: %s replaces it", f.Reason, why, c.best.Name)
	startFailover(p, in, c.best, c.position, f.FromLSN, reason)
	p.Action.EventReason = ReasonFailoverRetargeted
}

// detachFirst makes the plan detach the standbys (all but exclude) before
// the target is ranked.
func detachFirst(p *Plan, in Input, exclude []string, why string) {
	p.Action = Action{Kind: ActDetach, Pods: toDetach(in, exclude), Why: why}
	p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonFailingOver,
		why+": detaching the standbys from the old primary before choosing the one to promote")
}

// targetAbsent says why a failover's target cannot be promoted now, ""
// when it can (a running standby) or is promoting.
func targetAbsent(target *Instance) string {
	switch {
	case target == nil || !target.Exists:
		return "its pod does not exist"
	case target.Terminating:
		return "its pod is being deleted"
	case target.Agent == nil && target.Err != "":
		return "its agent does not answer: " + conditions.Quote(target.Err, 120)
	case target.Agent == nil:
		return "its pod has no IP"
	case target.Agent.State == agentapi.StatePromoting:
		return ""
	case target.Agent.State != agentapi.StateRunning || target.Agent.Role != agentapi.RoleReplica:
		return "it is " + describe(target.Agent)
	}
	return ""
}

// untilTransitionTimeout is how long from since until transitionTimeout
// has passed, for messages.
func untilTransitionTimeout(now, since time.Time) time.Duration {
	return (transitionTimeout - now.Sub(since)).Round(100 * time.Millisecond)
}

// failingOver says a failover runs: status.replication.lastFailover names
// the target and has not finished.
func failingOver(st *dbv1.ReplicationStatus) bool {
	return st != nil && st.LastFailover != nil && st.LastFailover.FinishedAt == nil &&
		st.TargetPrimary != "" && st.LastFailover.To == st.TargetPrimary && st.TargetPrimary != st.CurrentPrimary
}

// copyDiscarded records, once the lost primary rejoined as a standby
// (pg_rewind), how many of its transactions the promoted standby never had.
func copyDiscarded(p *Plan, byName map[string]*Instance) {
	f := p.LastFailover
	if f == nil || f.DiscardedTransactions != nil {
		return
	}
	old := byName[f.From]
	if old == nil || old.Agent == nil || old.Agent.LastRewind == nil || !old.Agent.LastRewind.At.After(f.StartedAt.Time) {
		return
	}
	n := old.Agent.LastRewind.DiscardedTransactions
	f.DiscardedTransactions = &n
}

// lastPrimaryLSN is the lost primary's last WAL position dbkeeper saw: its
// row in status.replication.instances, or what it answers now when that is
// further.
func lastPrimaryLSN(st dbv1.ReplicationStatus, prim *Instance) string {
	lsn := ""
	for _, row := range st.Instances {
		if row.Name == st.CurrentPrimary {
			lsn = row.CurrentLSN
		}
	}
	if prim != nil && prim.Agent != nil && prim.Agent.CurrentLSN != "" {
		a, ok1 := parseLSN(prim.Agent.CurrentLSN)
		b, ok2 := parseLSN(lsn)
		if ok1 && (!ok2 || a > b) {
			lsn = prim.Agent.CurrentLSN
		}
	}
	return lsn
}

// lacks is how much WAL of from the standby did not receive, 0 when it
// has it all or a position is unknown.
func lacks(from, received string) int64 {
	f, ok1 := parseLSN(from)
	r, ok2 := parseLSN(received)
	if !ok1 || !ok2 || r >= f {
		return 0
	}
	return int64(f - r)
}

func orUnknown(lsn string) string {
	if lsn == "" {
		return "an unknown position"
	}
	return lsn
}
