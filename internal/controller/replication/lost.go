package replication

import (
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
)

// lostPrimary is what the rules of a lost primary read: the view, the
// recorded primary (nil when no such instance), why it is lost, another
// instance that reports being a primary (other: "" or a clause for the
// condition), and lostMsg, the condition's since when and why.
type lostPrimary struct {
	*view
	prim                *Instance
	why, other, lostMsg string
}

// decidePrimaryLost: the recorded primary is not a healthy primary
// (phasePrimaryLost). It is either waited for (not lost, or lost for
// less than failoverDelay), or a failover starts, or one is refused with
// the field that refuses it. Once the delay has passed the standbys are
// detached from the lost primary first (ActDetach), and the target is
// chosen from what they report after that (chooseTarget).
func decidePrimaryLost(p *Plan, v *view) {
	p.TargetPrimary = p.CurrentPrimary
	p.Changing = true
	l := &lostPrimary{view: v, prim: v.byName[p.CurrentPrimary]}
	isLost, why := lost(l.prim, leaseEvidence(v.in.PrimaryLease, v.byName, p.CurrentPrimary), failsafeConfirmer(v.byName, p.CurrentPrimary))
	l.why = why
	if len(v.primaries) == 1 && v.primaries[0] != p.CurrentPrimary {
		l.other = fmt.Sprintf("; %s reports being a primary and is not selected", v.primaries[0])
	}
	if !isLost {
		p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonInstanceUnhealthy, fmt.Sprintf(
			"the primary %s is not available: %s%s", p.CurrentPrimary, why, l.other))
		return
	}
	p.PrimaryLostSince = v.st.PrimaryLostSince
	if p.PrimaryLostSince == nil {
		p.PrimaryLostSince = &metav1.Time{Time: v.in.Now}
	}
	l.lostMsg = fmt.Sprintf("the primary %s is lost since %s (%s)", p.CurrentPrimary, p.PrimaryLostSince.UTC().Format(time.RFC3339), why)
	switch {
	case recordLeaseHolder(p, l):
	case refuseFailover(p, l):
	default:
		failOverAfterDelay(p, l)
	}
}

// refuse says why no failover replaces the lost primary.
func (l *lostPrimary) refuse(p *Plan, format string, args ...any) {
	p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonFailoverRefused, l.lostMsg+": no failover: "+fmt.Sprintf(format, args...)+l.other)
}

// recordLeaseHolder: an instance that already runs as the primary holding
// the lease (a failover target that took it over after its failover was
// given up) is recorded, whatever the settings: the lease decided.
func recordLeaseHolder(p *Plan, l *lostPrimary) bool {
	for _, name := range l.primaries {
		if h := l.byName[name]; name != p.CurrentPrimary && h.healthyPrimary() && h.Agent.Lease != nil && h.Agent.Lease.Held {
			startFailover(p, l.in, h, h.Agent.CurrentLSN, lastPrimaryLSN(l.st, l.prim),
				fmt.Sprintf("the primary %s was lost: %s; %s holds the primary lease and runs as the primary", p.CurrentPrimary, l.why, name))
			return true
		}
	}
	return false
}

// refuseFailover: what the spec or the lost primary's volume refuse, in
// that order: one instance (a restart, not a refusal), failover disabled,
// a full volume.
func refuseFailover(p *Plan, l *lostPrimary) bool {
	db := l.in.DB
	switch n := l.n; {
	case n < 2:
		l.refuse(p, "spec.replicas is %d, there is no standby to promote; dbkeeper waits for it", n)
		p.Condition.Reason = dbv1.ReasonInstanceUnhealthy // one instance: a restart, not a refusal
		return true
	case !db.Spec.FailoverEnabled():
		l.refuse(p, "spec.highAvailability.failover is false; promote a standby with the annotation %s once the old primary is gone for good", dbv1.AnnotationSwitchoverTo)
		return true
	}
	if l.prim != nil {
		if last := l.prim.lastAnswer(); last != nil && last.VolumeFull {
			l.refuse(p, "its data volume is full (%d bytes free), and every standby's is the same size; grow spec.storage.size", last.VolumeAvailableBytes)
			return true
		}
	}
	return false
}

// failOverAfterDelay chooses the target; once failoverDelay has passed
// the standbys are detached first, then the failover starts.
func failOverAfterDelay(p *Plan, l *lostPrimary) {
	db := l.in.DB
	from := lastPrimaryLSN(l.st, l.prim)
	c := chooseTarget(l.in, p.SystemID, chooseArgs{exclude: []string{p.CurrentPrimary}, from: from,
		fromTimeline: primaryTimeline(db, l.prim, p.CurrentPrimary)})
	if c.refusal != "" {
		l.refuse(p, "%s", c.refusal)
		return
	}
	if wait := db.Spec.FailoverDelay() - l.in.Now.Sub(p.PrimaryLostSince.Time); wait > 0 {
		p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonPrimaryLost, fmt.Sprintf(
			"%s: %s will be promoted in %s unless the primary comes back (spec.highAvailability.failoverDelay %s)%s",
			l.lostMsg, c.best.Name, wait.Round(100*time.Millisecond), db.Spec.FailoverDelay(), l.other))
		p.Requeue = wait
		return
	}
	if l.in.Detached == nil {
		detachFirst(p, l.in, []string{p.CurrentPrimary}, l.lostMsg)
		return
	}
	startFailover(p, l.in, c.best, c.position, from, fmt.Sprintf("the primary %s was lost: %s", p.CurrentPrimary, l.why))
}

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
	case inst.Agent != nil && inst.Agent.State == agentapi.StateFenced:
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
	case inst.Agent == nil && lease != nil && lease.UnchangedFor >= agentapi.LeaseDuration:
		holder := "nobody (released)"
		if lease.Holder != "" {
			holder = lease.Holder
		}
		seen := ""
		if lease.SeenBy != "" {
			seen = " as " + lease.SeenBy + " sees it"
		}
		return true, fmt.Sprintf("its agent does not answer (%s) and the primary lease, held by %s, has not changed for %s%s (its duration is %s)",
			conditions.Quote(orNone(inst.Err), 120), holder, lease.UnchangedFor.Round(time.Second), seen, agentapi.LeaseDuration)
	case inst.PodReady && inst.Agent == nil:
		return false, "status unreadable, pod Ready: no failover (" + conditions.Quote(inst.Err, 120) + ")"
	case inst.PodReady:
		return false, "its pod is Ready, its agent reports " + describe(inst.Agent) + ": no failover while the pod is Ready"
	case inst.Agent == nil && inst.Err != "":
		return true, "its pod is not Ready and its agent does not answer: " + conditions.Quote(inst.Err, 120)
	case inst.Agent == nil:
		return true, "its pod is not Ready and has no IP"
	case inst.Agent.State != agentapi.StateRunning || inst.Agent.Role != agentapi.RolePrimary:
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

func orNone(s string) string {
	if s == "" {
		return "no answer"
	}
	return s
}
