package resources

import (
	"math"
	"strconv"
	"strings"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// Instances is the number of engine pods the Database runs: spec.replicas
// (default 1), but never fewer than the current (or switchover target)
// primary's ordinal + 1, so that a scale-down keeps the primary's pod
// until the replication controller has switched over to a lower ordinal;
// spec.replicas 0 stops every pod, the primary's included.
func Instances(db *dbv1.Database) int32 {
	want := db.Spec.ReplicaCount()
	if want <= 0 {
		return 0
	}
	if r := db.Status.Replication; r != nil {
		for _, pod := range []string{r.CurrentPrimary, r.TargetPrimary} {
			if n, ok := InstanceOrdinal(db, pod); ok {
				want = max(want, int32(n)+1)
			}
		}
	}
	return want
}

// InstanceOrdinal is the ordinal of the Database's engine pod named pod
// (InstanceName), false when pod is not one: the StatefulSet's name, a
// dash and a decimal ordinal as the StatefulSet controller writes it (no
// sign, no leading zero, below MaxInt32).
func InstanceOrdinal(db *dbv1.Database, pod string) (int, bool) {
	rest, ok := strings.CutPrefix(pod, StatefulSetName(db)+"-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 || n > math.MaxInt32-1 || strconv.Itoa(n) != rest {
		return 0, false
	}
	return n, true
}
