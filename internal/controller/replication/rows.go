package replication

import (
	"time"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
)

// rows are status.replication.instances.
func rows(in Input, current string) []dbv1.InstanceStatus {
	var prim *agentapi.Status
	for _, inst := range in.Instances {
		if inst.Name == current && inst.reportsPrimary() {
			prim = inst.Agent
		}
	}
	var out []dbv1.InstanceStatus
	for _, inst := range in.Instances {
		if !inst.Exists && inst.Ordinal >= replicas(in.DB) {
			continue
		}
		row := dbv1.InstanceStatus{Name: inst.Name}
		switch {
		case inst.Agent != nil:
			answeredRow(&row, in.DB, inst.Agent, prim)
		case inst.Err != "":
			row.State, row.Message = StateUnreachable, conditions.Quote(inst.Err, 200)
			row.CurrentLSN = lastCurrentLSN(in.DB, inst.Name, current)
		case !inst.Exists:
			row.Message = "the pod does not exist"
			row.CurrentLSN = lastCurrentLSN(in.DB, inst.Name, current)
		case inst.Terminating:
			row.Message = "the pod is being deleted"
			row.CurrentLSN = lastCurrentLSN(in.DB, inst.Name, current)
		default:
			row.Message = "the pod has no IP yet"
		}
		out = append(out, row)
	}
	return out
}

// answeredRow fills the row of an instance whose agent answered a; prim
// is the primary's answer (nil when it gave none), for the lag.
func answeredRow(row *dbv1.InstanceStatus, db *dbv1.Database, a, prim *agentapi.Status) {
	row.Role, row.State, row.Ready = string(a.Role), string(a.State), a.Ready
	row.Timeline = int64(a.Timeline)
	if prev := recordedRow(db, row.Name); prev != nil && a.WALReceiver != "streaming" && prev.Timeline > row.Timeline {
		// A standby without a WAL receiver reports its last
		// restartpoint's timeline, which lags a timeline switch by up
		// to checkpoint_timeout; an instance's timeline never goes
		// back, so the highest it reported stands.
		row.Timeline = prev.Timeline
	}
	row.CurrentLSN, row.ReceivedLSN, row.ReplayedLSN = a.CurrentLSN, a.ReceivedLSN, a.ReplayedLSN
	row.WALReceiver, row.Message = a.WALReceiver, a.Message
	if a.Role == agentapi.RoleReplica {
		if lag, ok := lagBytes(prim, a); ok {
			row.LagBytes = &lag
		}
	}
}

// lastCurrentLSN is the last current position recorded for the primary
// pod, kept while it does not answer: a failover reports what the promoted
// standby lacked of it.
func lastCurrentLSN(db *dbv1.Database, pod, current string) string {
	if row := recordedRow(db, pod); row != nil && pod == current {
		return row.CurrentLSN
	}
	return ""
}

// recordedRow is pod's row in status.replication.instances, nil when it
// has none.
func recordedRow(db *dbv1.Database, pod string) *dbv1.InstanceStatus {
	r := db.Status.Replication
	if r == nil {
		return nil
	}
	for i := range r.Instances {
		if r.Instances[i].Name == pod {
			return &r.Instances[i]
		}
	}
	return nil
}

// readGrace is how long after a switchover or failover finished the
// standbys that had the replica label keep it without streaming: each
// one's WAL receiver tries again every wal_retrieve_retry_interval (5 s)
// and reaches the new primary once kube-proxy follows its label (about a
// second), so two attempts.
const readGrace = 10 * time.Second

// labels are the role labels: primary on the recorded primary that alone
// reports being one (or answered as one a moment ago and is merely slow:
// slowPrimary), while no switchover runs; replica on streaming standbys,
// and, while no primary serves (a switchover, a lost primary, a failover)
// and just after, on the standbys that had it and still take read-only
// connections, so that <name>-ro keeps its endpoints: only the instance
// being promoted or demoted leaves it; none on every instance in doubt.
func labels(in Input, p Plan, primaries int) map[string]string {
	out := map[string]string{}
	switching := p.TargetPrimary != "" && p.TargetPrimary != p.CurrentPrimary
	serving := false
	for i := range in.Instances {
		if inst := &in.Instances[i]; inst.Name == p.CurrentPrimary {
			serving = !switching && inst.healthyPrimary() && inst.claimsPrimary()
		}
	}
	settled := in.SettledAt
	if f := p.LastFailover; f != nil && f.FinishedAt != nil && f.FinishedAt.After(settled) {
		settled = f.FinishedAt.Time
	}
	keepReaders := !serving || p.Action.Kind == ActFinishSwitchover || p.Action.Kind == ActFinishFailover ||
		(!settled.IsZero() && in.Now.Sub(settled) < readGrace)
	for _, inst := range in.Instances {
		if !inst.Exists || inst.Terminating {
			continue
		}
		role := ""
		switch {
		case inst.Name == p.CurrentPrimary && !switching && primaries == 1 && inst.healthyPrimary() &&
			(inst.Agent.Lease == nil || inst.Agent.Lease.Held):
			role = dbv1.RolePrimary
		case inst.Name == p.CurrentPrimary && !switching && primaries == 0 && inst.slowPrimary(in.Now):
			role = dbv1.RolePrimary
		case inst.Name == p.CurrentPrimary || primaries > 1 || (switching && inst.Name == p.TargetPrimary):
			// the primary, being demoted or promoted, or in doubt
		case inst.streaming():
			role = dbv1.RoleReplica
		case keepReaders && inst.Label == dbv1.RoleReplica && inst.readable(p.SystemID):
			role = dbv1.RoleReplica
		}
		out[inst.Name] = role
	}
	return out
}
