package replication

import (
	"fmt"
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
