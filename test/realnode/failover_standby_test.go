//go:build failover

package realnode

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/controller/replication"
	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
)

// The faults of issue 28 where a standby is behind in a way the primary's
// WAL alone cannot fix: its replication slot invalidated (it fell more
// than max_slot_wal_keep_size behind), or WAL it received but cannot
// replay yet when it is promoted.

// standbySlotLost pauses a standby's WAL receiver, switches the primary's
// WAL past the slot cap and checkpoints until the standby's slot is
// invalidated (wal_status lost, or already made again by the controller,
// which says so in a ReplicationSlotLost Event), then resumes it. Without
// a person, the standby streams again through a slot that reserves WAL
// (made again; the agent clones the standby afresh when the primary no
// longer has the segment it needs), with the rows written while it was
// behind; the primary stays, nothing acknowledged is lost. The suite's
// next faults, failovers under Required synchronous replication, show
// that the lost slot no longer blocks one.
func (h *ha) standbySlotLost(i int) {
	t := h.t
	t.Helper()
	ctx := context.Background()
	old := h.converged()
	lagging := h.standbysOf(old)[0]
	slot := agentapi.SlotName(lagging)
	resume, err := h.inj.PauseWALReceiver(ctx, h.db.Namespace, lagging)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resume() })
	at := time.Now()
	h.faultAt = at
	t.Logf("fault standby-slot-lost run %d: %s's WAL receiver paused, the primary %s switches WAL past the cap of slot %s", i, lagging, old, slot)

	walStatus := func() string {
		v, err := sqlWithin(h.super, "SELECT coalesce(wal_status, '') FROM pg_catalog.pg_replication_slots WHERE slot_name = '"+slot+"'", 10*time.Second)
		require.NoError(t, err)
		return v
	}
	// the agent sizes the cap by the volume: the server says it, in MB
	capMB, err := sqlWithin(h.super, "SELECT setting FROM pg_catalog.pg_settings WHERE name = 'max_slot_wal_keep_size'", 10*time.Second)
	require.NoError(t, err)
	segments, err := strconv.Atoi(capMB)
	require.NoError(t, err)
	segments /= 16
	for range segments + 3 {
		// the writer fills each segment a little: a switch with nothing
		// written since the last one does not end a segment
		acks := h.w.AckCount()
		require.Eventually(t, func() bool { return h.w.AckCount() > acks }, timeout, 10*time.Millisecond, "the primary takes writes")
		_, err := sqlWithin(h.super, "SELECT pg_catalog.pg_switch_wal()::text", 10*time.Second)
		require.NoError(t, err)
	}
	behind := h.w.Acked()
	last := behind[len(behind)-1]
	// A checkpoint invalidates the slot past the cap, and first has its
	// WAL sender end: that one is stuck sending to the stopped receiver
	// (the kernel acknowledges, the window stays shut), so the
	// checkpoint waits until the receiver reads again.
	checkpointed := make(chan error, 1)
	go func() { checkpointed <- checkpoint(h.super, 3*time.Minute) }()
	select {
	case err := <-checkpointed:
		require.NoError(t, err)
		checkpointed <- nil
		t.Logf("fault standby-slot-lost run %d: the checkpoint ended with %s's receiver still stopped", i, lagging)
	case <-time.After(10 * time.Second):
		t.Logf("fault standby-slot-lost run %d: the checkpoint still waits after 10 s for the WAL sender of the stopped receiver", i)
	}
	resumed := time.Now()
	require.NoError(t, resume())
	require.NoError(t, <-checkpointed)
	t.Logf("fault standby-slot-lost run %d: slot %s is %q %s after the fault", i, slot, walStatus(), time.Since(at).Round(time.Millisecond))

	require.Eventually(t, func() bool { return h.hasEvent(replication.ReasonReplicationSlotLost, at) }, timeout, 250*time.Millisecond,
		"a %s Event for %s", replication.ReasonReplicationSlotLost, slot)
	primary := h.converged()
	streaming := time.Since(resumed)
	t.Logf("MEASURED failover standby-slot-lost run %d: resumed→streaming again %s", i, streaming.Round(time.Millisecond))
	assert.Equal(t, old, primary, "a standby's lost slot is no failover")
	assert.Contains(t, []string{"reserved", "extended"}, walStatus(), "slot %s reserves WAL again", slot)
	standby := podTarget(t, h.db, lagging)
	standby.Database = h.rw.Database
	require.Eventually(t, func() bool {
		v, err := sqlWithin(standby, fmt.Sprintf("SELECT count(*) FROM acks WHERE id = %d", last), 5*time.Second)
		return err == nil && v == "1"
	}, timeout, 250*time.Millisecond, "%s has id %d, acknowledged while it was behind", lagging, last)
	h.assertOnlyPrimaryWrites(primary)
	h.assertNoneLost("")
}

// holdReplay makes every standby of primary receive WAL it cannot replay
// yet: a session on each reads table hold in an open transaction, then
// the primary truncates the table (an exclusive lock, which replay must
// take): a standby waits for the session up to
// max_standby_streaming_delay (30 s) after it received the lock, then
// cancels it. It returns once each standby received WAL it did not
// replay, and a function that closes the sessions.
func holdReplay(h *ha, primary string) func() {
	t := h.t
	t.Helper()
	ctx := context.Background()
	table := fmt.Sprintf("hold_%d", h.runs)
	_, err := sqlWithin(h.super, "CREATE TABLE "+table+" (x int)", 30*time.Second)
	require.NoError(t, err)
	var sessions []*sqlconn.Conn
	release := func() {
		for _, c := range sessions {
			_ = c.Close(ctx)
		}
	}
	t.Cleanup(release)
	standbys := h.standbysOf(primary)
	for _, s := range standbys {
		target := podTarget(t, h.db, s)
		require.Eventually(t, func() bool {
			_, err := sqlWithin(target, "SELECT count(*) FROM "+table, 5*time.Second)
			return err == nil
		}, timeout, 100*time.Millisecond, "%s replayed the creation of %s", s, table)
		c, err := sqlconn.Connect(ctx, target)
		require.NoError(t, err)
		sessions = append(sessions, c)
		_, err = c.Exec(ctx, "BEGIN")
		require.NoError(t, err)
		_, err = c.Exec(ctx, "SELECT count(*) FROM "+table)
		require.NoError(t, err)
	}
	_, err = sqlWithin(h.super, "TRUNCATE "+table, 30*time.Second)
	require.NoError(t, err)
	for _, s := range standbys {
		target := podTarget(t, h.db, s)
		require.Eventually(t, func() bool {
			v, err := sqlWithin(target, "SELECT (pg_catalog.pg_last_wal_receive_lsn() > pg_catalog.pg_last_wal_replay_lsn())::text", 5*time.Second)
			return err == nil && v == "true"
		}, timeout, 100*time.Millisecond, "%s received WAL it does not replay", s)
	}
	return release
}

// replayBacklog is the fault replay-backlog: every standby's replay held
// back (holdReplay), then the primary frozen. The standby promoted still
// has WAL to replay, for about 20 s after the failover started (the lock
// came 30 s before its session is cancelled, the Lease and the decision
// took the rest): its agent holds the Lease and says Promoting meanwhile,
// and the controller waits for it rather than replace it or give up; it
// serves with every acknowledged commit.
func replayBacklog(h *ha, primary string, at time.Time) injected {
	release := holdReplay(h, primary)
	lostAt := time.Now()
	thaw, err := h.inj.Freeze(context.Background(), h.db.Namespace, primary)
	require.NoError(h.t, err)
	h.t.Cleanup(func() { _ = thaw() })
	return injected{heal: func() { require.NoError(h.t, thaw()) }, healAfter: lostAt.Sub(at) + freezeFor, failover: true, lostAt: lostAt,
		fenceBy: func() time.Time { return lostAt.Add(freezeFor) }, finally: release,
		after: func(lf *dbv1.FailoverStatus) {
			if lf.FinishedAt == nil {
				return // run asserted it is set
			}
			took := lf.FinishedAt.Sub(lf.StartedAt.Time)
			h.t.Logf("fault replay-backlog: the promotion of %s took %s (from the choice to the first write it accepted)", lf.To, took.Round(time.Millisecond))
			assert.Greater(h.t, took, 5*time.Second, "the promoted standby replayed a backlog first")
			assert.False(h.t, h.hasEvent(replication.ReasonFailoverRetargeted, at), "the promoting target is waited for, not replaced")
		}}
}

// checkpoint runs CHECKPOINT on target without the statement timeout of
// sqlconn, within d.
func checkpoint(target sqlconn.Target, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	conn, err := sqlconn.Connect(ctx, target)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "SET statement_timeout = 0"); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, "CHECKPOINT")
	return err
}
