//go:build failover

package realnode

import (
	"context"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/replication"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
)

// The faults of issue 28 where the instance meant to become the primary
// is the one that fails: a switchover's target dying after the demote,
// a failover's target disappearing before it promoted. Neither may leave
// the Database without a primary: each wait is bounded (the replication
// controller's transitionTimeout, 20 s), then another instance serves.

// targetBound is how long after the target died writes must be accepted
// again: the controller's bound, the promotion, relabelling.
const targetBound = 45 * time.Second

// standbysOf are the instances other than primary, in name order.
func (h *ha) standbysOf(primary string) []string {
	var out []string
	for i := range haInstances {
		if n := resources.InstanceName(h.db, i); n != primary {
			out = append(out, n)
		}
	}
	return out
}

// switchoverTargetDies asks for a switchover to a standby whose WAL
// receiver is paused (it cannot replay the demoted primary's shutdown
// checkpoint) and freezes that standby once the primary was demoted: the
// switchover falls back within its bound (the demoted primary, which has
// every commit, is promoted back), writes are accepted again, one primary,
// no acknowledged id lost.
func (h *ha) switchoverTargetDies(i int) {
	t := h.t
	t.Helper()
	ctx := context.Background()
	old := h.converged()
	target := h.standbysOf(old)[0]
	resume, err := h.inj.PauseWALReceiver(ctx, h.db.Namespace, target)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resume() })
	t.Logf("fault switchover-target-dies run %d: switchover %s → %s, %s's WAL receiver paused", i, old, target, target)
	asked := time.Now()
	requestSwitchover(t, h.db, target)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NotEmpty(ct, dbtest.Get(ct, k8s, h.db).Status.Replication.SwitchoverLSN, "the primary demoted")
	}, timeout, 50*time.Millisecond)
	thaw, err := h.inj.Freeze(ctx, h.db.Namespace, target)
	require.NoError(t, err)
	t.Cleanup(func() { _ = thaw() })
	at := time.Now()
	h.faultAt = at

	require.Eventually(t, func() bool { _, ok := h.w.FirstAckAfter(at); return ok }, targetBound, 50*time.Millisecond,
		"writes accepted again within %s after the switchover's target %s died", targetBound, target)
	first, _ := h.w.FirstAckAfter(at)
	h.measured["switchover-target-dies"] = append(h.measured["switchover-target-dies"], first.Sub(at))
	t.Logf("MEASURED failover switchover-target-dies run %d: died→write %s (%s after the switchover was asked)", i,
		first.Sub(at).Round(time.Millisecond), first.Sub(asked).Round(time.Millisecond))
	live := dbtest.Get(t, k8s, h.db)
	assert.Equal(t, old, live.Status.Replication.CurrentPrimary, "the demoted primary, which has every commit, serves again")
	assert.True(t, h.hasEvent(replication.ReasonSwitchoverFellBack, at.Add(-time.Minute)), "a %s Event", replication.ReasonSwitchoverFellBack)
	assert.NotContains(t, live.Annotations, dbv1.AnnotationSwitchoverTo,
		"the annotation of the switchover that fell back is removed: the target's return does not start it again")

	require.NoError(t, thaw())
	require.NoError(t, resume())
	primary := h.converged()
	h.assertOnlyPrimaryWrites(primary)
	h.assertNoneLost("")
}

// failoverTargetDisappears cuts both standbys off from the API server
// (neither can take the primary lease) and freezes the primary: the
// failover chooses a target, which cannot promote; that target is then
// frozen too and the other standby reconnected to the API server. Within
// the bound the failover goes on to the other standby, which serves;
// what was lost is what status reports.
func (h *ha) failoverTargetDisappears(i int) {
	t := h.t
	t.Helper()
	ctx := context.Background()
	old := h.converged()
	lastBefore := dbtest.Get(t, k8s, h.db).Status.Replication.LastFailover
	fence := h.startFence(old)
	defer fence.Stop()
	uncut := map[string]func() error{}
	for _, s := range h.standbysOf(old) {
		_, undo, err := h.inj.CutFromAPIServer(ctx, getPod(t, h.db, s).Status.PodIP)
		require.NoError(t, err)
		uncut[s] = undo
		t.Cleanup(func() { _ = undo() })
	}
	thawOld, err := h.inj.Freeze(ctx, h.db.Namespace, old)
	require.NoError(t, err)
	t.Cleanup(func() { _ = thawOld() })
	at := time.Now()
	h.faultAt = at
	t.Logf("fault failover-target-disappears run %d: primary %s frozen, standbys cut from the API server", i, old)

	var first string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		r := dbtest.Get(ct, k8s, h.db).Status.Replication
		first = r.TargetPrimary
		assert.NotEqual(ct, old, first, "a failover target chosen")
	}, convergeTimeout, 50*time.Millisecond)
	thawFirst, err := h.inj.Freeze(ctx, h.db.Namespace, first)
	require.NoError(t, err)
	t.Cleanup(func() { _ = thawFirst() })
	gone := time.Now()
	var other string
	for s, undo := range uncut {
		if s != first {
			other = s
			require.NoError(t, undo())
		}
	}
	t.Logf("fault failover-target-disappears run %d: target %s frozen %s after the fault; %s reaches the API server again",
		i, first, gone.Sub(at).Round(time.Millisecond), other)

	require.Eventually(t, func() bool { _, ok := h.w.FirstAckAfter(gone); return ok }, targetBound, 50*time.Millisecond,
		"writes accepted again within %s after the failover's target %s disappeared", targetBound, first)
	resumedAt, _ := h.w.FirstAckAfter(gone)
	h.measured["failover-target-disappears"] = append(h.measured["failover-target-disappears"], resumedAt.Sub(at))
	t.Logf("MEASURED failover failover-target-disappears run %d: loss→write %s (target gone→write %s)", i,
		resumedAt.Sub(at).Round(time.Millisecond), resumedAt.Sub(gone).Round(time.Millisecond))
	r := dbtest.Get(t, k8s, h.db).Status.Replication
	assert.Equal(t, other, r.CurrentPrimary, "the failover went on to the standby left")
	require.NotNil(t, r.LastFailover)
	assert.NotEqual(t, lastBefore, r.LastFailover, "lastFailover records the failover")
	assert.True(t, h.hasEvent(replication.ReasonFailoverRetargeted, at), "a %s Event", replication.ReasonFailoverRetargeted)

	// the writer straight to the old primary stops before it thaws: a
	// connection it opened while the primary was frozen could otherwise
	// commit one more unacknowledged write in the instant before it
	// fences (discarded, and counted, but no writer's in flight)
	fence.Stop()
	require.NoError(t, thawFirst())
	require.NoError(t, thawOld())
	require.NoError(t, uncut[first]())
	primary := h.converged()
	h.assertOnlyPrimaryWrites(primary)
	h.assertAcknowledged(fence, true)
}

// hasEvent says an Event of reason regarding the Database was recorded
// since.
func (h *ha) hasEvent(reason string, since time.Time) bool {
	return eventSince(h.t, h.db, reason, since)
}
