package replication

import (
	"fmt"
	"slices"
	"strings"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// synchronousFor is the synchronous replication the primary should run
// with: nil without spec.highAvailability.synchronous (commits wait for no
// standby). With Required durability it names every standby with an
// ordinal below spec.replicas, its pod existing or not (a standby being
// recreated is still one the commits must reach; a removed instance, at or
// above spec.replicas, is never named): commits wait for Number of them,
// also when fewer stream (writes then block: Degraded). With Preferred it names only the
// standbys that stream, and asks at most as many as there are: none
// streaming, commits wait for nobody (Degraded).
func synchronousFor(db *dbv1.Database, insts []Instance, primary string) *dbv1.SynchronousStatus {
	spec := db.Spec.HighAvailability.Synchronous
	if spec == nil {
		return nil
	}
	k := max(spec.Number, 1)
	n := replicas(db)
	var named []string
	streaming := 0
	for i := range insts {
		inst := &insts[i]
		if inst.Name == primary || inst.Ordinal >= n {
			continue
		}
		if inst.streaming() {
			streaming++
		} else if spec.DataDurability == dbv1.DataDurabilityPreferred {
			continue
		}
		named = append(named, inst.Name)
	}
	st := &dbv1.SynchronousStatus{Standbys: named, Number: k, Degraded: int32(streaming) < k}
	if spec.DataDurability == dbv1.DataDurabilityPreferred {
		st.Number = min(k, int32(len(named)))
	}
	if len(named) == 0 || st.Number == 0 {
		st.Standbys, st.Number = nil, 0
		return st
	}
	method := "ANY"
	if spec.Method == dbv1.SynchronousFirst {
		method = "FIRST"
	}
	quoted := make([]string, len(named))
	for i, name := range named {
		quoted[i] = quoteIdent(name)
	}
	st.StandbyNames = fmt.Sprintf("%s %d (%s)", method, st.Number, strings.Join(quoted, ", "))
	return st
}

// standbyNames is the synchronous_standby_names of st.
func standbyNames(st *dbv1.SynchronousStatus) string {
	if st == nil {
		return ""
	}
	return st.StandbyNames
}

// SyncApplied is the synchronous_standby_names (Names) this manager saw
// the primary (Primary) run with, and the primary's current WAL position
// (LSN) at the first poll after it did ("" until then): every commit
// acknowledged under the former setting is at or before it.
type SyncApplied struct {
	Primary, Names, LSN string
}

// synchronousRecord is what status.replication.synchronous records (what
// a failover's quorum counts on, decideLost) while the primary prim runs
// with want, and why it is not want yet. A change that weakens the
// quorum (a standby no longer named, a larger number: commits confirmed
// under the former setting may be on none of the standbys now named, or on
// fewer than the new number) is recorded only once want.Number of the
// standbys now named have received, streaming on the primary's timeline,
// up to applied.LSN; until then the former record stands. Any other change
// is recorded at once.
func synchronousRecord(recorded, want *dbv1.SynchronousStatus, applied SyncApplied, insts []Instance, prim *Instance) (*dbv1.SynchronousStatus, string) {
	if want == nil || len(want.Standbys) == 0 || recorded == nil || len(recorded.Standbys) == 0 || !weakens(recorded, want) || prim == nil {
		return want, ""
	}
	pending := func(why string) (*dbv1.SynchronousStatus, string) {
		return recorded, fmt.Sprintf("status.replication.synchronous keeps %q until %d of %s received what the primary wrote before it ran with %q (%s)",
			recorded.StandbyNames, want.Number, strings.Join(want.Standbys, ", "), want.StandbyNames, why)
	}
	if applied.Primary != prim.Name || applied.Names != want.StandbyNames || applied.LSN == "" {
		return pending("its position after the change is read on the next poll")
	}
	at, _ := parseLSN(applied.LSN)
	caughtUp := 0
	for i := range insts {
		inst := &insts[i]
		if !slices.Contains(want.Standbys, inst.Name) || !inst.streaming() || prim.Agent == nil || inst.Agent.Timeline != prim.Agent.Timeline {
			continue
		}
		if r, ok := parseLSN(inst.Agent.ReceivedLSN); ok && r >= at {
			caughtUp++
		}
	}
	if caughtUp >= int(want.Number) {
		return want, ""
	}
	return pending(fmt.Sprintf("%d received up to %s", caughtUp, applied.LSN))
}

// weakens says whether replacing old by updated lowers what a failover
// can count on: every commit acknowledged under old is on old.Number of
// old.Standbys, which is on updated.Number of updated.Standbys only when
// updated names all of old's and asks no more of them.
func weakens(old, updated *dbv1.SynchronousStatus) bool {
	for _, name := range old.Standbys {
		if !slices.Contains(updated.Standbys, name) {
			return true
		}
	}
	return updated.Number > old.Number
}
