package replication

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// TestReadOnlyServiceKeepsStandbys (issue 28, item 5): during a switchover
// and a failover the standbys that are neither promoted nor demoted keep
// the replica label, so <name>-ro keeps endpoints; the target leaves it.
func TestReadOnlyServiceKeepsStandbys(t *testing.T) {
	t.Run("switchover", func(t *testing.T) {
		f, s := converged(t, 3)
		f.annotate("orders-1")
		for i := range 8 {
			f.step(s)
			st := f.get().Status.Replication
			ro := f.labelled(dbv1.RoleReplica)
			assert.Contains(t, ro, "orders-2", "step %d: the read-only Service lost its standby (%s)", i, f.condition().Message)
			if st.TargetPrimary != st.CurrentPrimary && i > 0 {
				// (the reconcile that records the switchover labels
				// nothing: the status goes first)
				assert.NotContains(t, ro, "orders-1", "step %d: the target being promoted stays in the read-only Service", i)
			}
		}
		assert.Equal(t, "orders-1", f.get().Status.Replication.CurrentPrimary)
	})
	t.Run("failover", func(t *testing.T) {
		f, s := converged(t, 3)
		clock := clocked(s)
		f.lose("orders-0")
		for i := range 10 {
			*clock = clock.Add(3 * time.Second)
			f.step(s)
			assert.NotEmpty(t, f.labelled(dbv1.RoleReplica), "step %d: the read-only Service is empty (%s)", i, f.condition().Message)
		}
		assert.NotEqual(t, "orders-0", f.get().Status.Replication.CurrentPrimary)
	})
}
