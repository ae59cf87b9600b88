package replication

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// TestSynchronousShrinkRecordedOnceCaughtUp (issue 28, item 3): a smaller
// synchronous set is recorded in status.replication.synchronous, which a
// failover's quorum counts on, only once enough of the standbys that
// remain received everything the primary wrote up to the change: the
// commits confirmed by the removed standby alone are not on the others
// before that.
func TestSynchronousShrinkRecordedOnceCaughtUp(t *testing.T) {
	f, s := converged(t, 3)
	db := f.get()
	db.Spec.HighAvailability.Synchronous = &dbv1.SynchronousSpec{Method: dbv1.SynchronousAny, Number: 1, DataDurability: dbv1.DataDurabilityRequired}
	require.NoError(t, f.c.Update(context.Background(), db))
	f.step(s)
	require.Equal(t, []string{"orders-1", "orders-2"}, f.get().Status.Replication.Synchronous.Standbys)

	// orders-1 falls behind: the commits since are confirmed by orders-2
	// alone
	f.agents.SetPaused(f.db, "orders-1", true)
	f.agents.Write(f.db, 0x1000)
	f.step(s)

	// scaling down removes orders-2: the primary waits for orders-1 now
	db = f.get()
	db.Spec.Replicas = ptr.To[int32](2)
	db.Generation++
	require.NoError(t, f.c.Update(context.Background(), db))
	f.run(s, 3)
	assert.Equal(t, `ANY 1 ("orders-1")`, f.servers.SynchronousStandbyNames(f.db))
	assert.Equal(t, []string{"orders-1", "orders-2"}, f.get().Status.Replication.Synchronous.Standbys,
		"the smaller set was recorded before orders-1 received the commits orders-2 alone confirmed")

	// orders-1 catches up: the smaller set is recorded
	f.agents.SetPaused(f.db, "orders-1", false)
	f.run(s, 3)
	assert.Equal(t, []string{"orders-1"}, f.get().Status.Replication.Synchronous.Standbys)
	assert.Equal(t, dbv1.ReasonReplicating, f.condition().Reason, f.condition().Message)
}
