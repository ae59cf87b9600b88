package replication

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
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
func position(a *agentapi.Status) string {
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
func timelineOf(db *dbv1.Database, name string, a *agentapi.Status) uint32 {
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
	c := candidatesOf(in, systemID, a.exclude)
	if len(c.list) == 0 {
		return choice{refusal: fmt.Sprintf("no standby can be promoted (%s)", strings.Join(c.rejected, "; "))}
	}
	if refusal := c.onNewestTimeline(db, a.fromTimeline); refusal != "" {
		return choice{refusal: refusal}
	}
	rank(c.list, a.prefer)
	best, refusal := synchronousBest(db, c.list, a)
	if refusal != "" {
		return choice{refusal: refusal}
	}
	pos := position(best.Agent)
	if refusal := lagRefusal(db, best.Name, pos, a.from); refusal != "" {
		return choice{refusal: refusal}
	}
	return choice{best: best, position: pos}
}

// candidates are the instances a failover may promote, and why the others
// below spec.replicas may not.
type candidates struct {
	list     []*Instance
	rejected []string
	n        int
}

func (c *candidates) reject(inst *Instance, why string) {
	if inst.Ordinal < c.n {
		c.rejected = append(c.rejected, inst.Name+": "+why)
	}
}

// candidatesOf are in's instances but exclude that failoverCandidate
// accepts and, once in.Detached says which were, were detached.
func candidatesOf(in Input, systemID string, exclude []string) *candidates {
	c := &candidates{n: replicas(in.DB)}
	for i := range in.Instances {
		inst := &in.Instances[i]
		if slices.Contains(exclude, inst.Name) {
			continue
		}
		why := failoverCandidate(inst, systemID, c.n)
		if why == "" && in.Detached != nil && !in.Detached[inst.Name] {
			why = "it could not be detached from the lost primary"
		}
		if why != "" {
			c.reject(inst, why)
			continue
		}
		c.list = append(c.list, inst)
	}
	return c
}

// onNewestTimeline keeps the candidates on the newest timeline among
// them: positions compare only on one history. It refuses when that is
// behind the lost primary's timeline (fromTimeline): such a standby did
// not follow the last promotion; what it has past the fork is WAL the
// primary's history never had.
func (c *candidates) onNewestTimeline(db *dbv1.Database, fromTimeline uint32) string {
	newest := uint32(0)
	for _, inst := range c.list {
		newest = max(newest, timelineOf(db, inst.Name, inst.Agent))
	}
	if fromTimeline > newest {
		return fmt.Sprintf("the standbys that can be promoted (%s) are on timeline %d, behind the lost primary's timeline %d",
			names(c.list), newest, fromTimeline)
	}
	c.list = slices.DeleteFunc(c.list, func(inst *Instance) bool {
		if tli := timelineOf(db, inst.Name, inst.Agent); tli < newest {
			c.reject(inst, fmt.Sprintf("it is on timeline %d, behind %d", tli, newest))
			return true
		}
		return false
	})
	return ""
}

// rank sorts the candidates, the most advanced first: by position, then
// prefer, then one on a node that stays before one on a node being
// drained (it would be evicted next), then the replayed position, then
// the name.
func rank(list []*Instance, prefer string) {
	slices.SortFunc(list, func(x, y *Instance) int {
		px, _ := parseLSN(position(x.Agent))
		py, _ := parseLSN(position(y.Agent))
		if c := cmp.Compare(py, px); c != 0 {
			return c
		}
		if (x.Name == prefer) != (y.Name == prefer) {
			if x.Name == prefer {
				return -1
			}
			return 1
		}
		if c := staysFirst(x, y); c != 0 {
			return c
		}
		rx, _ := parseLSN(x.Agent.ReplayedLSN)
		ry, _ := parseLSN(y.Agent.ReplayedLSN)
		if c := cmp.Compare(ry, rx); c != 0 {
			return c
		}
		return cmp.Compare(x.Name, y.Name)
	})
}

// synchronousBest is the target among the ranked candidates: the first,
// but with Required synchronous replication (every acknowledged commit is
// on k of the named standbys S: any |S|-k+1 of them include one that has
// it, and the most advanced of those has them all) the first of those S
// names, unless the first has a.from, the old primary's final WAL.
func synchronousBest(db *dbv1.Database, ranked []*Instance, a chooseArgs) (*Instance, string) {
	best := ranked[0]
	pos := position(best.Agent)
	hasAll := a.final && lacks(a.from, pos) == 0 && pos != "" && a.from != ""
	st := db.Status.Replication
	sync := db.Spec.HighAvailability.Synchronous
	if hasAll || sync == nil || sync.DataDurability == dbv1.DataDurabilityPreferred ||
		st == nil || st.Synchronous == nil || len(st.Synchronous.Standbys) == 0 {
		return best, ""
	}
	named, k := st.Synchronous.Standbys, int(st.Synchronous.Number)
	var answering []*Instance
	for _, c := range ranked {
		if slices.Contains(named, c.Name) {
			answering = append(answering, c)
		}
	}
	need := len(named) - k + 1
	if len(answering) < need {
		return nil, fmt.Sprintf("spec.highAvailability.synchronous.dataDurability is Required and only %d of the synchronous standbys %s can be promoted; %d are needed (status.replication.synchronous: %d of %d confirm each commit) to be sure none acknowledged is lost",
			len(answering), strings.Join(named, ", "), need, k, len(named))
	}
	return answering[0], ""
}

// lagRefusal says why best, at pos, lacks too much of from, the lost
// primary's last position (spec.highAvailability.maxFailoverLag; an
// unknown position never passes a limit), "" when it does not.
func lagRefusal(db *dbv1.Database, best, pos, from string) string {
	limit := db.Spec.MaxFailoverLag()
	if limit <= 0 {
		return ""
	}
	switch lack := lacks(from, pos); {
	case pos == "":
		return fmt.Sprintf("the most advanced standby %s reports no WAL position (received or replayed), so its lag cannot be held to spec.highAvailability.maxFailoverLag (%d bytes; 0 is no limit)",
			best, limit)
	case from == "":
		return fmt.Sprintf("the lost primary's last position is unknown, so what %s lacks of it cannot be held to spec.highAvailability.maxFailoverLag (%d bytes; 0 is no limit)",
			best, limit)
	case lack > limit:
		return fmt.Sprintf("the most advanced standby %s received %s, %d bytes behind the lost primary's last position %s; spec.highAvailability.maxFailoverLag is %d bytes",
			best, pos, lack, from, limit)
	}
	return ""
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
		if !slices.Contains(exclude, inst.Name) && inst.Exists && !inst.Terminating && inst.Agent != nil && inst.Agent.Role == agentapi.RoleReplica {
			out = append(out, inst.Name)
		}
	}
	return out
}

// primaryTimeline is the lost primary's timeline as last seen: its row
// in status or its last answer, whichever is higher.
func primaryTimeline(db *dbv1.Database, prim *Instance, name string) uint32 {
	var last *agentapi.Status
	if prim != nil {
		last = prim.lastAnswer()
	}
	return timelineOf(db, name, last)
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
	case inst.Agent.State != agentapi.StateRunning:
		return "it is " + string(inst.Agent.State)
	case inst.Agent.Role != agentapi.RoleReplica:
		return fmt.Sprintf("it reports role %q", inst.Agent.Role)
	case !inst.Agent.Ready || !inst.PodReady:
		return "it is not ready"
	case systemID != "" && inst.Agent.SystemID != systemID:
		return fmt.Sprintf("its system identifier %s is not the Database's %s", inst.Agent.SystemID, systemID)
	}
	return ""
}
