package replication

import (
	"fmt"
	"time"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
)

// What the rules ask of an instance, from what its pod and its agent
// report.

func (i *Instance) reportsPrimary() bool {
	return i.Agent != nil && i.Agent.Role == agentapi.RolePrimary
}

// claimsPrimary: the instance reports being a primary that may run as
// one: not fenced, and not while its agent sees another holder of the
// primary lease (a former primary that has yet to rejoin as a standby).
func (i *Instance) claimsPrimary() bool {
	if !i.reportsPrimary() || i.Agent.State == agentapi.StateFenced {
		return false
	}
	l := i.Agent.Lease
	return l == nil || l.Holder == "" || l.Holder == i.Name
}

// healthyPrimary: the instance runs as a primary and takes connections.
func (i *Instance) healthyPrimary() bool {
	return i.reportsPrimary() && i.Agent.State == agentapi.StateRunning && i.Agent.Ready && !i.Terminating
}

// streaming: a standby that runs, takes read-only connections and
// streams.
func (i *Instance) streaming() bool {
	return i.Agent != nil && i.Agent.Role == agentapi.RoleReplica && i.Agent.State == agentapi.StateRunning && i.Agent.Ready &&
		i.Agent.WALReceiver == "streaming" && !i.Terminating && i.PodReady
}

// readable: a standby that runs and takes read-only connections (a hot
// standby does only once it reached a consistent state), of the
// Database's system, streaming or not.
func (i *Instance) readable(systemID string) bool {
	return i.Agent != nil && i.Agent.Role == agentapi.RoleReplica && i.Agent.State == agentapi.StateRunning && i.Agent.Ready &&
		i.PodReady && !i.Terminating && (systemID == "" || i.Agent.SystemID == systemID)
}

// slowPrimary: the primary's agent did not answer within statusTimeout
// this time, but its pod is Ready, it carries the primary label, and its
// last answer, less than LeaseRenewDeadline ago (by then a primary that
// cannot renew its lease has fenced itself), was a running primary
// holding the lease. One slow answer of a loaded primary does not take
// the read-write Service's endpoint away.
func (i *Instance) slowPrimary(now time.Time) bool {
	a := i.LastAnswer
	return i.Agent == nil && i.TimedOut && i.PodReady && !i.Terminating && i.Label == dbv1.RolePrimary &&
		a != nil && a.Role == agentapi.RolePrimary && a.State == agentapi.StateRunning && a.Ready && (a.Lease == nil || a.Lease.Held) &&
		now.Sub(i.LastAnswerAt) < agentapi.LeaseRenewDeadline
}

// problem says what is wrong with a standby, "" when nothing is.
func (i *Instance) problem() string {
	switch {
	case !i.Exists:
		return "its pod does not exist"
	case i.Terminating:
		return "its pod is being deleted"
	case i.Agent == nil && i.Err != "":
		return "its agent does not answer: " + conditions.Quote(i.Err, 120)
	case i.Agent == nil:
		return "its pod has no IP yet"
	case i.Agent.State != agentapi.StateRunning:
		msg := "it is " + string(i.Agent.State)
		if i.Agent.Message != "" {
			msg += ": " + conditions.Quote(i.Agent.Message, 120)
		}
		return msg
	case !i.Agent.Ready || !i.PodReady:
		return "it is not ready"
	case i.Agent.Role == agentapi.RoleReplica && i.Agent.WALReceiver != "streaming":
		return fmt.Sprintf("it does not stream from the primary (WAL receiver %q)", i.Agent.WALReceiver)
	}
	return ""
}

// lastAnswer is what inst's agent answered now, or last (this manager's
// memory), nil when it never did.
func (i *Instance) lastAnswer() *agentapi.Status {
	if i.Agent != nil {
		return i.Agent
	}
	return i.LastAnswer
}

// describe is an agent's answer in a few words.
func describe(a *agentapi.Status) string {
	s := fmt.Sprintf("%s, role %q", a.State, a.Role)
	if a.Message != "" {
		s += ": " + conditions.Quote(a.Message, 120)
	}
	return s
}

// lagBytes is how far the standby's replayed position is behind the
// primary's current one.
func lagBytes(prim, standby *agentapi.Status) (int64, bool) {
	if prim == nil || standby == nil {
		return 0, false
	}
	cur, ok1 := parseLSN(prim.CurrentLSN)
	rep, ok2 := parseLSN(standby.ReplayedLSN)
	if !ok1 || !ok2 {
		return 0, false
	}
	if rep >= cur {
		return 0, true
	}
	return int64(cur - rep), true
}
