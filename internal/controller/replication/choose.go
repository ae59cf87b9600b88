package replication

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agent"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
)

// transitionTimeout bounds two waits that would otherwise leave the
// Database without a primary for ever: a switchover's wait for its target
// once the old primary was demoted (a healthy target replays the demoted
// primary's last WAL within a second or two), and a failover's wait for a
// target that is gone (its agent takes the lease within LeaseDuration +
// 2 × LeaseRetryPeriod, 8 s, of the promote). 20 s is more than either
// takes when the target is there, on a loaded node too.
const transitionTimeout = 20 * time.Second

// position is a standby's WAL position for ranking: the received one,
// else (a standby that restarted has received nothing since, yet replayed
// its WAL) the replayed one, whichever is further; "" when it reports
// neither.
func position(a *agent.Status) string {
	r, okR := parseLSN(a.ReceivedLSN)
	p, okP := parseLSN(a.ReplayedLSN)
	switch {
	case okR && (!okP || r >= p):
		return a.ReceivedLSN
	case okP:
		return a.ReplayedLSN
	}
	return ""
}

// timelineOf is inst's timeline: the highest of what it reports and its
// row in status (a standby without a WAL receiver reports its last
// restartpoint's, behind a recent switch).
func timelineOf(db *dbv1.Database, name string, a *agent.Status) uint32 {
	tli := uint32(0)
	if a != nil {
		tli = a.Timeline
	}
	if row := recordedRow(db, name); row != nil && row.Timeline > int64(tli) {
		tli = uint32(row.Timeline)
	}
	return tli
}

// chooseArgs are what a failover target is chosen with.
type chooseArgs struct {
	// exclude are no candidates: the lost primary, a lost target.
	exclude []string
	// from is the lost primary's last WAL position, fromTimeline its
	// timeline (0: unknown).
	from         string
	fromTimeline uint32
	// prefer is ranked first among equals: a switchover's former
	// primary.
	prefer string
	// final says from is the last WAL the old primary wrote (a
	// switchover's shutdown checkpoint): a candidate that has it has
	// every commit, whatever the synchronous quorum.
	final bool
}

// choice is the chosen target and its position, or why none may be
// promoted.
type choice struct {
	best     *Instance
	position string
	refusal  string
}

// chooseTarget chooses a failover target among in's standbys: running,
// Ready, of the Database's system (failoverCandidate), detached from the
// lost primary when in.Detached says which were; on the newest timeline
// among them, and not behind the lost primary's; the most advanced
// (position, then a.prefer, then the replayed position, then the name);
// with Required synchronous replication one of at least |S| − k + 1
// answering named standbys; lacking at most maxFailoverLag of a.from, an
// unknown position never passing a limit.
func chooseTarget(in Input, systemID string, a chooseArgs) choice {
	db := in.DB
	n := replicas(db)
	var candidates []*Instance
	var rejected []string
	reject := func(inst *Instance, why string) {
		if inst.Ordinal < n {
			rejected = append(rejected, inst.Name+": "+why)
		}
	}
	for i := range in.Instances {
		inst := &in.Instances[i]
		if slices.Contains(a.exclude, inst.Name) {
			continue
		}
		why := failoverCandidate(inst, systemID, n)
		if why == "" && in.Detached != nil && !in.Detached[inst.Name] {
			why = "it could not be detached from the lost primary"
		}
		if why != "" {
			reject(inst, why)
			continue
		}
		candidates = append(candidates, inst)
	}
	none := func() choice {
		return choice{refusal: fmt.Sprintf("no standby can be promoted (%s)", strings.Join(rejected, "; "))}
	}
	if len(candidates) == 0 {
		return none()
	}

	// Positions compare only on one history: the newest timeline among
	// the candidates, never one behind the lost primary's (such a standby
	// did not follow the last promotion; what it has past the fork is
	// WAL the primary's history never had).
	newest := uint32(0)
	for _, c := range candidates {
		newest = max(newest, timelineOf(db, c.Name, c.Agent))
	}
	if a.fromTimeline > newest {
		return choice{refusal: fmt.Sprintf("the standbys that can be promoted (%s) are on timeline %d, behind the lost primary's timeline %d",
			names(candidates), newest, a.fromTimeline)}
	}
	candidates = slices.DeleteFunc(candidates, func(c *Instance) bool {
		if tli := timelineOf(db, c.Name, c.Agent); tli < newest {
			reject(c, fmt.Sprintf("it is on timeline %d, behind %d", tli, newest))
			return true
		}
		return false
	})

	slices.SortFunc(candidates, func(x, y *Instance) int {
		px, _ := parseLSN(position(x.Agent))
		py, _ := parseLSN(position(y.Agent))
		if c := cmp.Compare(py, px); c != 0 {
			return c
		}
		if (x.Name == a.prefer) != (y.Name == a.prefer) {
			if x.Name == a.prefer {
				return -1
			}
			return 1
		}
		rx, _ := parseLSN(x.Agent.ReplayedLSN)
		ry, _ := parseLSN(y.Agent.ReplayedLSN)
		if c := cmp.Compare(ry, rx); c != 0 {
			return c
		}
		return cmp.Compare(x.Name, y.Name)
	})
	best := candidates[0]
	pos := position(best.Agent)

	// With Required synchronous replication every acknowledged commit is
	// on k of the named standbys S: any |S|-k+1 of them include one that
	// has it, and the most advanced of those has them all.
	hasAll := a.final && lacks(a.from, pos) == 0 && pos != "" && a.from != ""
	st := db.Status.Replication
	if sync := db.Spec.HighAvailability.Synchronous; !hasAll && sync != nil && sync.DataDurability != dbv1.DataDurabilityPreferred &&
		st != nil && st.Synchronous != nil && len(st.Synchronous.Standbys) > 0 {
		named, k := st.Synchronous.Standbys, int(st.Synchronous.Number)
		var answering []*Instance
		for _, c := range candidates {
			if slices.Contains(named, c.Name) {
				answering = append(answering, c)
			}
		}
		need := len(named) - k + 1
		if len(answering) < need {
			return choice{refusal: fmt.Sprintf("spec.highAvailability.synchronous.dataDurability is Required and only %d of the synchronous standbys %s can be promoted; %d are needed (status.replication.synchronous: %d of %d confirm each commit) to be sure none acknowledged is lost",
				len(answering), strings.Join(named, ", "), need, k, len(named))}
		}
		best = answering[0]
		pos = position(best.Agent)
	}

	if limit := db.Spec.MaxFailoverLag(); limit > 0 {
		switch lack := lacks(a.from, pos); {
		case pos == "":
			return choice{refusal: fmt.Sprintf("the most advanced standby %s reports no WAL position (received or replayed), so its lag cannot be held to spec.highAvailability.maxFailoverLag (%d bytes; 0 is no limit)",
				best.Name, limit)}
		case a.from == "":
			return choice{refusal: fmt.Sprintf("the lost primary's last position is unknown, so what %s lacks of it cannot be held to spec.highAvailability.maxFailoverLag (%d bytes; 0 is no limit)",
				best.Name, limit)}
		case lack > limit:
			return choice{refusal: fmt.Sprintf("the most advanced standby %s received %s, %d bytes behind the lost primary's last position %s; spec.highAvailability.maxFailoverLag is %d bytes",
				best.Name, pos, lack, a.from, limit)}
		}
	}
	return choice{best: best, position: pos}
}

func names(insts []*Instance) string {
	out := make([]string, len(insts))
	for i, inst := range insts {
		out[i] = inst.Name
	}
	return strings.Join(out, ", ")
}

// toDetach are the instances a failover detaches before it ranks them:
// every standby that answers, but the excluded ones.
func toDetach(in Input, exclude []string) []string {
	var out []string
	for _, inst := range in.Instances {
		if !slices.Contains(exclude, inst.Name) && inst.Exists && !inst.Terminating && inst.Agent != nil && inst.Agent.Role == agent.RoleReplica {
			out = append(out, inst.Name)
		}
	}
	return out
}

// primaryTimeline is the lost primary's timeline as last seen: its row
// in status or its last answer, whichever is higher.
func primaryTimeline(db *dbv1.Database, prim *Instance, name string) uint32 {
	var last *agent.Status
	if prim != nil {
		last = prim.lastAnswer()
	}
	return timelineOf(db, name, last)
}

// fallBack ends a switchover whose target has not promoted within
// transitionTimeout of the old primary's demotion: the former primary,
// when it answers and has the newest data, is promoted back, else the most
// advanced standby left (failover rules, and only with failover enabled).
// Either is recorded as a failover from the target, which never became
// the primary: currentPrimary names it until the promotion is done, and
// the promotion takes the primary lease as a failover's does, so a target
// that did promote and vanished cannot run beside it.
func fallBack(p *Plan, in Input, byName map[string]*Instance, why string) {
	db := in.DB
	old, target := p.CurrentPrimary, p.TargetPrimary
	from, final := p.SwitchoverLSN, p.SwitchoverLSN != ""
	st := dbv1.ReplicationStatus{}
	if db.Status.Replication != nil {
		st = *db.Status.Replication
	}
	if !final {
		from = lastPrimaryLSN(st, byName[old])
	}
	stuck := fmt.Sprintf("the switchover from %s to %s did not finish: it waited %s for %s", old, target, transitionTimeout, why)
	c := chooseTarget(in, p.SystemID, chooseArgs{exclude: []string{target}, from: from, fromTimeline: primaryTimeline(db, byName[old], old),
		prefer: old, final: final})
	if c.refusal != "" {
		p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonFailoverRefused, stuck+"; no instance can take over: "+c.refusal)
		return
	}
	if c.best.Name != old && !db.Spec.FailoverEnabled() {
		p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonFailoverRefused, fmt.Sprintf(
			"%s; %s cannot be promoted back and spec.highAvailability.failover is false, so %s is not promoted instead", stuck, old, c.best.Name))
		return
	}
	if in.Detached == nil {
		detachFirst(p, in, []string{target}, stuck)
		return
	}
	reason := stuck + "; " + old + " has the newest data and is promoted back"
	if c.best.Name != old {
		reason = fmt.Sprintf("%s; %s is the most advanced instance left", stuck, c.best.Name)
	}
	p.CurrentPrimary = target
	p.PrimaryLostSince = &metav1.Time{Time: in.Now}
	startFailover(p, in, c.best, c.position, from, reason)
	p.Action.EventReason = ReasonSwitchoverFellBack
}

// detachFirst makes the plan detach the standbys (all but exclude) before
// the target is ranked.
func detachFirst(p *Plan, in Input, exclude []string, why string) {
	p.Action = Action{Kind: ActDetach, Pods: toDetach(in, exclude), Why: why}
	p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonFailingOver,
		why+": detaching the standbys from the old primary before choosing the one to promote")
}

// replaceTarget replaces the target of a running failover that has been
// gone (absent says how) for transitionTimeout since the failover started
// with the best of the remaining candidates, or says why none can be.
func replaceTarget(p *Plan, in Input, byName map[string]*Instance, absent string) {
	db := in.DB
	lost, gone := p.CurrentPrimary, p.TargetPrimary
	f := p.LastFailover
	c := chooseTarget(in, p.SystemID, chooseArgs{exclude: []string{lost, gone}, from: f.FromLSN, fromTimeline: primaryTimeline(db, byName[lost], lost)})
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
	case target.Agent.State == agent.StatePromoting:
		return ""
	case target.Agent.State != agent.StateRunning || target.Agent.Role != agent.RoleReplica:
		return "it is " + describe(target.Agent)
	}
	return ""
}

// untilTransitionTimeout is how long from since until transitionTimeout
// has passed, for messages.
func untilTransitionTimeout(now, since time.Time) time.Duration {
	return (transitionTimeout - now.Sub(since)).Round(100 * time.Millisecond)
}
