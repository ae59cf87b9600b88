package replication

import (
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agent"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
)

// lost says whether the recorded primary inst (nil: no such instance) is
// lost, a failover's reason, and why not when it is not: an instance that
// is not a healthy primary but may still be one (a Ready pod whose agent
// did not answer this time) is waited for, never failed over, unless the
// primary lease, as this manager watched it (lease), has not changed for
// LeaseDuration: its holder cannot have renewed it, so it fenced itself
// or is frozen. An agent that answers as a running primary is never lost
// for a stale lease (it may serve on while cut off from the API server),
// nor is one a standby reports serving in failsafe (confirmedBy: it
// confirmed, moments ago, that the primary serves without the API server,
// and it promotes nothing for LeaseDuration after: the primary is alive
// and reachable from its peers, only not from this manager).
func lost(inst *Instance, lease *LeaseView, confirmedBy string) (bool, string) {
	switch {
	case inst == nil || !inst.Exists:
		return true, "its pod does not exist"
	case inst.Terminating:
		return true, "its pod is being deleted"
	case inst.Agent != nil && inst.Agent.State == agent.StateFenced:
		msg := "its agent fenced it (it stopped its server: it could not keep the primary lease)"
		if inst.Agent.Message != "" {
			msg += ": " + conditions.Quote(inst.Agent.Message, 120)
		}
		return true, msg
	case inst.Agent != nil && inst.Agent.Lease != nil && inst.Agent.Lease.Holder != "" && inst.Agent.Lease.Holder != inst.Name:
		return true, fmt.Sprintf("its agent sees the primary lease held by %s", inst.Agent.Lease.Holder)
	case inst.Agent == nil && confirmedBy != "":
		return false, fmt.Sprintf("its agent does not answer (%s) but %s confirmed it serves without the API server (failsafe): no failover",
			conditions.Quote(orNone(inst.Err), 120), confirmedBy)
	case inst.Agent == nil && lease != nil && lease.UnchangedFor >= agent.LeaseDuration:
		holder := "nobody (released)"
		if lease.Holder != "" {
			holder = lease.Holder
		}
		seen := ""
		if lease.SeenBy != "" {
			seen = " as " + lease.SeenBy + " sees it"
		}
		return true, fmt.Sprintf("its agent does not answer (%s) and the primary lease, held by %s, has not changed for %s%s (its duration is %s)",
			conditions.Quote(orNone(inst.Err), 120), holder, lease.UnchangedFor.Round(time.Second), seen, agent.LeaseDuration)
	case inst.PodReady && inst.Agent == nil:
		return false, "status unreadable, pod Ready: no failover (" + conditions.Quote(inst.Err, 120) + ")"
	case inst.PodReady:
		return false, "its pod is Ready, its agent reports " + describe(inst.Agent) + ": no failover while the pod is Ready"
	case inst.Agent == nil && inst.Err != "":
		return true, "its pod is not Ready and its agent does not answer: " + conditions.Quote(inst.Err, 120)
	case inst.Agent == nil:
		return true, "its pod is not Ready and has no IP"
	case inst.Agent.State != agent.StateRunning || inst.Agent.Role != agent.RolePrimary:
		return true, "its pod is not Ready and its agent reports " + describe(inst.Agent)
	}
	return false, "its pod is not Ready, its agent reports a running primary: waiting for it"
}

// failsafeConfirmer is the first instance (by name) whose agent reports
// that it confirmed primary's failsafe, "" when none does.
func failsafeConfirmer(byName map[string]*Instance, primary string) string {
	var names []string
	for name, inst := range byName {
		if name != primary && inst.Agent != nil && inst.Agent.Lease != nil && inst.Agent.Lease.ConfirmedFailsafeOf == primary {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	return slices.Min(names)
}

// describe is an agent's answer in a few words.
func describe(a *agent.Status) string {
	s := fmt.Sprintf("%s, role %q", a.State, a.Role)
	if a.Message != "" {
		s += ": " + conditions.Quote(a.Message, 120)
	}
	return s
}

// lastAnswer is what inst's agent answered now, or last (this manager's
// memory), nil when it never did.
func (i *Instance) lastAnswer() *agent.Status {
	if i.Agent != nil {
		return i.Agent
	}
	return i.LastAnswer
}

// failoverCandidate says why inst cannot be promoted by a failover, ""
// when it can: it runs as a Ready standby of the Database's system. Its
// WAL receiver need not stream (the primary it streamed from is lost).
func failoverCandidate(inst *Instance, systemID string, n int) string {
	switch {
	case inst.Ordinal >= n:
		return fmt.Sprintf("its ordinal %d is not below spec.replicas %d", inst.Ordinal, n)
	case !inst.Exists:
		return "its pod does not exist"
	case inst.Terminating:
		return "its pod is being deleted"
	case inst.Agent == nil && inst.Err != "":
		return "its agent does not answer"
	case inst.Agent == nil:
		return "its pod has no IP"
	case inst.Agent.State != agent.StateRunning:
		return "it is " + string(inst.Agent.State)
	case inst.Agent.Role != agent.RoleReplica:
		return fmt.Sprintf("it reports role %q", inst.Agent.Role)
	case !inst.Agent.Ready || !inst.PodReady:
		return "it is not ready"
	case systemID != "" && inst.Agent.SystemID != systemID:
		return fmt.Sprintf("its system identifier %s is not the Database's %s", inst.Agent.SystemID, systemID)
	}
	return ""
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

// decideLost: the recorded primary is not a healthy primary. It is either
// waited for (not lost, or lost for less than failoverDelay), or a failover
// starts, or one is refused with the field that refuses it. Once the delay
// has passed the standbys are detached from the lost primary first
// (ActDetach), and the target is chosen from what they report after that
// (chooseTarget).
func decideLost(p *Plan, in Input, byName map[string]*Instance, prim *Instance, primaries []string) {
	db := in.DB
	t := dbv1.ConditionReplicationReady
	st := dbv1.ReplicationStatus{}
	if db.Status.Replication != nil {
		st = *db.Status.Replication
	}
	p.Changing = true
	isLost, why := lost(prim, leaseEvidence(in.PrimaryLease, byName, p.CurrentPrimary), failsafeConfirmer(byName, p.CurrentPrimary))
	other := ""
	if len(primaries) == 1 && primaries[0] != p.CurrentPrimary {
		other = fmt.Sprintf("; %s reports being a primary and is not selected", primaries[0])
	}
	if !isLost {
		p.Condition = conditions.False(t, dbv1.ReasonInstanceUnhealthy, fmt.Sprintf(
			"the primary %s is not available: %s%s", p.CurrentPrimary, why, other))
		return
	}
	p.PrimaryLostSince = st.PrimaryLostSince
	if p.PrimaryLostSince == nil {
		p.PrimaryLostSince = &metav1.Time{Time: in.Now}
	}
	since := p.PrimaryLostSince.Time
	lostMsg := fmt.Sprintf("the primary %s is lost since %s (%s)", p.CurrentPrimary, since.UTC().Format(time.RFC3339), why)
	refuse := func(format string, args ...any) {
		p.Condition = conditions.False(t, dbv1.ReasonFailoverRefused, lostMsg+": no failover: "+fmt.Sprintf(format, args...)+other)
	}
	// An instance that already runs as the primary holding the lease (a
	// failover target that took it over after its failover was given up)
	// is recorded, whatever the settings: the lease decided.
	for _, name := range primaries {
		if h := byName[name]; name != p.CurrentPrimary && h.healthyPrimary() && h.Agent.Lease != nil && h.Agent.Lease.Held {
			startFailover(p, in, h, h.Agent.CurrentLSN, lastPrimaryLSN(st, prim), fmt.Sprintf("the primary %s was lost: %s; %s holds the primary lease and runs as the primary", p.CurrentPrimary, why, name))
			return
		}
	}
	n := replicas(db)
	if n < 2 {
		refuse("spec.replicas is %d, there is no standby to promote; dbkeeper waits for it", n)
		p.Condition.Reason = dbv1.ReasonInstanceUnhealthy // one instance: a restart, not a refusal
		return
	}
	if !db.Spec.FailoverEnabled() {
		refuse("spec.highAvailability.failover is false; promote a standby with the annotation %s once the old primary is gone for good", dbv1.AnnotationSwitchoverTo)
		return
	}
	if prim != nil {
		if last := prim.lastAnswer(); last != nil && last.VolumeFull {
			refuse("its data volume is full (%d bytes free), and every standby's is the same size; grow spec.storage.size", last.VolumeAvailableBytes)
			return
		}
	}

	from := lastPrimaryLSN(st, prim)
	c := chooseTarget(in, p.SystemID, chooseArgs{exclude: []string{p.CurrentPrimary}, from: from,
		fromTimeline: primaryTimeline(db, prim, p.CurrentPrimary)})
	if c.refusal != "" {
		refuse("%s", c.refusal)
		return
	}
	if wait := db.Spec.FailoverDelay() - in.Now.Sub(since); wait > 0 {
		p.Condition = conditions.False(t, dbv1.ReasonPrimaryLost, fmt.Sprintf(
			"%s: %s will be promoted in %s unless the primary comes back (spec.highAvailability.failoverDelay %s)%s",
			lostMsg, c.best.Name, wait.Round(100*time.Millisecond), db.Spec.FailoverDelay(), other))
		p.Requeue = wait
		return
	}
	if in.Detached == nil {
		detachFirst(p, in, []string{p.CurrentPrimary}, lostMsg)
		return
	}
	startFailover(p, in, c.best, c.position, from, fmt.Sprintf("the primary %s was lost: %s", p.CurrentPrimary, why))
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

func orNone(s string) string {
	if s == "" {
		return "no answer"
	}
	return s
}

func orUnknown(lsn string) string {
	if lsn == "" {
		return "an unknown position"
	}
	return lsn
}

// failingOver says a failover runs: status.replication.lastFailover names
// the target and has not finished.
func failingOver(st *dbv1.ReplicationStatus) bool {
	return st != nil && st.LastFailover != nil && st.LastFailover.FinishedAt == nil &&
		st.TargetPrimary != "" && st.LastFailover.To == st.TargetPrimary && st.TargetPrimary != st.CurrentPrimary
}

// decideFailover: a failover runs. No demote (the old primary is lost):
// the target is asked to promote (Failover: it takes the lease over when
// it may) on every poll until it reports being the primary. An old
// primary that comes back holding the lease first ends it; another
// instance running as the primary with the lease becomes the target; a
// target gone for transitionTimeout since the failover started is
// replaced by the best remaining candidate (replaceTarget).
func decideFailover(p *Plan, in Input, byName map[string]*Instance, primaries []string) {
	t := dbv1.ConditionReplicationReady
	p.Changing = true
	p.PrimaryLostSince = in.DB.Status.Replication.PrimaryLostSince
	old, target := byName[p.CurrentPrimary], byName[p.TargetPrimary]
	msg := func(reason, s string, args ...any) {
		p.Condition = conditions.False(t, reason,
			fmt.Sprintf("failing over from %s to %s: ", p.CurrentPrimary, p.TargetPrimary)+fmt.Sprintf(s, args...))
	}
	targetPrimary := target != nil && target.Agent != nil && target.Agent.Role == agent.RolePrimary && target.Agent.State == agent.StateRunning
	if !targetPrimary && old != nil && old.healthyPrimary() && old.PodReady && (old.Agent.Lease == nil || old.Agent.Lease.Held) {
		p.Action = Action{Kind: ActAbortFailover, Pod: p.TargetPrimary, From: p.CurrentPrimary,
			Why: fmt.Sprintf("%s came back as a healthy primary holding the lease before %s was promoted", p.CurrentPrimary, p.TargetPrimary)}
		p.LastFailover.Reason += "; aborted: " + p.Action.Why
		p.Condition = conditions.False(t, dbv1.ReasonInstanceUnhealthy, fmt.Sprintf(
			"the failover from %s to %s was aborted: %s; %s stays the primary", p.CurrentPrimary, p.TargetPrimary, p.Action.Why, p.CurrentPrimary))
		p.TargetPrimary, p.PrimaryLostSince = p.CurrentPrimary, nil
		return
	}
	if targetPrimary {
		now := metav1.Time{Time: in.Now}
		p.LastFailover.FinishedAt = &now
		p.Action = Action{Kind: ActFinishFailover, Pod: p.TargetPrimary, From: p.CurrentPrimary, LSN: target.Agent.CurrentLSN}
		p.CurrentPrimary, p.PrimaryLostSince = p.TargetPrimary, nil
		p.Condition = conditions.False(t, dbv1.ReasonFailingOver, fmt.Sprintf("%s is the primary after a failover from %s", p.CurrentPrimary, p.LastFailover.From))
		return
	}
	for _, name := range primaries {
		if h := byName[name]; name != p.CurrentPrimary && name != p.TargetPrimary && h.healthyPrimary() && h.Agent.Lease != nil && h.Agent.Lease.Held {
			startFailover(p, in, h, h.Agent.CurrentLSN, p.LastFailover.FromLSN,
				fmt.Sprintf("%s; %s holds the primary lease and runs as the primary", p.LastFailover.Reason, name))
			p.Action.EventReason = ReasonFailoverRetargeted
			return
		}
	}
	absent := targetAbsent(target)
	if absent != "" && in.Now.Sub(p.LastFailover.StartedAt.Time) >= transitionTimeout {
		msg(dbv1.ReasonFailingOver, "%s cannot be promoted: %s", p.TargetPrimary, absent)
		replaceTarget(p, in, byName, absent)
		return
	}
	if target == nil || !target.Exists || target.Agent == nil {
		msg(dbv1.ReasonFailingOver, "waiting for %s: %s (another standby replaces it in %s)", p.TargetPrimary, absent,
			untilTransitionTimeout(in.Now, p.LastFailover.StartedAt.Time))
		return
	}
	p.Action = Action{Kind: ActPromote, Pod: p.TargetPrimary, From: p.CurrentPrimary, Failover: true}
	state := string(target.Agent.State)
	if l := target.Agent.Lease; l != nil && l.Error != "" {
		state += ", lease: " + conditions.Quote(l.Error, 120)
	}
	msg(dbv1.ReasonFailingOver, "promoting %s (%s) once it holds the primary lease", p.TargetPrimary, state)
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
