package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// TestStandbyWithALostSlotIsClonedAgain: db-1's WAL receiver is cut off
// while db-0 writes and switches more WAL than max_slot_wal_keep_size
// (1MB here) lets its slot keep; a checkpoint invalidates the slot
// (wal_status 'lost') and removes the segments db-1 needs. Back in reach,
// db-1's WAL receiver is refused ("requested WAL segment ... has already
// been removed") on every attempt: its agent empties the data directory
// and waits to be cloned. The test then does what the replication
// controller does (drops the lost slot and makes it again, clones the
// empty instance), and db-1 streams again. Before the fix db-1 stayed a
// running standby that never streamed.
func TestStandbyWithALostSlotIsClonedAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and a kube-apiserver; skipped under -short")
	}
	p := startLeasedPair(t, "-c", "max_slot_wal_keep_size=1MB", "-c", "wal_retrieve_retry_interval=1s")
	c, a, b, pa := p.c, p.a, p.b, p.pa
	ctx := context.Background()
	slot := agentapi.SlotName(b.name)
	slotState := func() (bool, string) {
		var active bool
		var walStatus string
		require.NoError(t, pa.QueryRow(ctx, "SELECT active, COALESCE(wal_status, '') FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active, &walStatus))
		return active, walStatus
	}
	waitFor(t, func() bool { active, walStatus := slotState(); return active && walStatus == "reserved" }, 20*time.Second,
		"db-1 streaming through its slot")

	// db-1 is cut off; db-0 writes on.
	c.proxy.pause()
	waitFor(t, func() bool { active, _ := slotState(); return !active }, 20*time.Second, "db-1's slot inactive")
	waitFor(t, func() bool {
		for i := range 3 {
			mustExec(t, pa, "INSERT INTO t VALUES ($1)", 1000+i)
			mustExec(t, pa, "SELECT pg_switch_wal()")
		}
		mustExec(t, pa, "CHECKPOINT")
		_, walStatus := slotState()
		return walStatus == "lost"
	}, 30*time.Second, "db-1's slot lost")
	mustExec(t, pa, "INSERT INTO t VALUES (2000)")

	// Back in reach: db-1's agent finds its WAL gone and empties it.
	c.proxy.resume()
	start := time.Now()
	sb := c.waitStatus(b, 60*time.Second, "emptied to be cloned again", func(s agentapi.Status) bool {
		return s.State == agentapi.StateWaiting && s.DataEmpty
	})
	t.Logf("MEASURED db-1 emptied %s after it could reach db-0 again: %s", time.Since(start).Round(time.Millisecond), sb.Message)
	assert.Contains(t, sb.Message, "no longer has WAL segment")
	assert.Contains(t, sb.Message, "db-0 runs as the primary")

	// The replication controller's part: the lost slot made again, the
	// empty instance cloned.
	mustExec(t, pa, "SELECT pg_drop_replication_slot($1)", slot)
	mustExec(t, pa, "SELECT pg_create_physical_replication_slot($1, true)", slot)
	_, err := c.client.Bootstrap(ctx, b.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapClone})
	require.NoError(t, err)
	c.waitStatus(b, 90*time.Second, "a streaming standby", func(s agentapi.Status) bool {
		return runningAs(agentapi.RoleReplica)(s) && s.WALReceiver == "streaming"
	})
	pb := sql(t, b)
	mustExec(t, pa, "INSERT INTO t VALUES (3000)")
	waitFor(t, func() bool { return count(t, pb, "SELECT count(*) FROM t WHERE id IN (2000, 3000)") == 2 }, 20*time.Second,
		"rows committed on db-0 visible on db-1")
	active, walStatus := slotState()
	assert.True(t, active, "db-1 streams through its slot")
	assert.Equal(t, "reserved", walStatus)
	assert.Equal(t, agentapi.RolePrimary, c.status(a).Role)
	assert.Equal(t, "db-0", p.holder())
}
