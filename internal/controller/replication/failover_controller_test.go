package replication

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// lose deletes the pod of the primary for good (its node is gone): its
// server stops with it.
func (f *fixture) lose(pod string) {
	if f.gone == nil {
		f.gone = map[string]bool{}
	}
	f.gone[pod] = true
	p := &corev1.Pod{}
	require.NoError(f.t, f.c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: pod}, p))
	require.NoError(f.t, f.c.Delete(context.Background(), p))
	f.agents.SetStopped(f.db, pod, true)
}

// clocked gives s a clock the test moves.
func clocked(s *syncer) *time.Time {
	clock := time.Now()
	s.now = func() time.Time { return clock }
	return &clock
}

// TestFailover: the primary's pod is deleted for good; after the delay the
// most advanced standby is promoted with Failover, the labels move, a
// Warning Event says what happened and lastFailover records it. A manager
// restarted in the middle carries on.
func TestFailover(t *testing.T) {
	f, s := converged(t, 3)
	clock := clocked(s)
	// orders-2 stops receiving: orders-1 is the most advanced
	f.agents.SetPaused(f.db, "orders-2", true)
	f.agents.Write(f.db, 0x2000)
	f.step(s)
	primaryLSN := f.get().Status.Replication.Instances[0].CurrentLSN
	require.NotEmpty(t, primaryLSN)
	f.eventsText()
	calls := len(f.agents.Calls())

	f.lose("orders-0")
	f.step(s)
	st := f.get().Status.Replication
	require.NotNil(t, st.PrimaryLostSince, "the loss is not recorded")
	assert.Equal(t, dbv1.ReasonPrimaryLost, f.condition().Reason, f.condition().Message)
	assert.Contains(t, f.condition().Message, "spec.highAvailability.failoverDelay")
	assert.Empty(t, f.labelled(dbv1.RolePrimary))

	*clock = clock.Add(9 * time.Second)
	f.step(s)
	assert.Len(t, f.agents.Calls(), calls, "promoted before failoverDelay")

	*clock = clock.Add(2 * time.Second)
	f.step(s) // StartFailover: status first
	st = f.get().Status.Replication
	assert.Equal(t, "orders-1", st.TargetPrimary)
	require.NotNil(t, st.LastFailover)
	assert.Equal(t, "orders-0", st.LastFailover.From)
	assert.Equal(t, "orders-1", st.LastFailover.To)
	assert.Equal(t, primaryLSN, st.LastFailover.FromLSN)
	ev := f.eventsText()
	assert.Contains(t, ev, "Warning "+ReasonFailoverStarted+" Failing over from orders-0 to orders-1")
	assert.Contains(t, ev, primaryLSN)

	restarted := f.syncer() // a manager restarted during the failover
	clock = clocked(restarted)
	*clock = clock.Add(12 * time.Second)
	f.run(restarted, 4)
	var promotes, detachedFirst, detachedAfter []string
	for _, c := range f.agents.Calls()[calls:] {
		if strings.HasPrefix(c, "detach ") {
			if len(promotes) == 0 {
				detachedFirst = append(detachedFirst, c)
			} else {
				detachedAfter = append(detachedAfter, c)
			}
			continue
		}
		promotes = append(promotes, c)
	}
	assert.Contains(t, detachedAfter, "detach orders-2",
		"the standby's WAL receiver starts again once the new primary is labelled (it may wait for its connect timeout otherwise)")
	assert.Equal(t, []string{"promote orders-1 failover"}, promotes, "promoted other than once, with Failover")
	assert.Subset(t, detachedFirst, []string{"detach orders-1", "detach orders-2"},
		"the standbys were not cut off the lost primary before the promotion")
	st = f.get().Status.Replication
	assert.Equal(t, "orders-1", st.CurrentPrimary)
	assert.Equal(t, "orders-1", st.TargetPrimary)
	assert.Nil(t, st.PrimaryLostSince)
	require.NotNil(t, st.LastFailover.FinishedAt)
	assert.Equal(t, "orders-1", f.agents.Holder(f.db))
	assert.Equal(t, []string{"orders-1"}, f.labelled(dbv1.RolePrimary))
	assert.Contains(t, f.eventsText(), "Warning "+ReasonFailoverCompleted+" Failed over from orders-0 to orders-1")

	// orders-2 follows the new primary
	f.agents.SetPaused(f.db, "orders-2", false)
	f.run(restarted, 2)
	assert.Equal(t, []string{"orders-2"}, f.labelled(dbv1.RoleReplica))
	assert.Equal(t, dbv1.ReasonInstanceUnhealthy, f.condition().Reason, "orders-0 is gone: %s", f.condition().Message)

	// The former primary comes back and rejoins with pg_rewind.
	delete(f.gone, "orders-0")
	f.agents.Rejoin(f.db, "orders-0", clock.Add(time.Second), 2)
	f.run(restarted, 2)
	st = f.get().Status.Replication
	require.NotNil(t, st.LastFailover.DiscardedTransactions)
	assert.Equal(t, int64(2), *st.LastFailover.DiscardedTransactions)
	assert.Equal(t, []string{"orders-0", "orders-2"}, f.labelled(dbv1.RoleReplica))
	assert.Equal(t, []string{"orders-1"}, f.labelled(dbv1.RolePrimary))
	assert.Equal(t, dbv1.ReasonReplicating, f.condition().Reason, f.condition().Message)
	assert.Contains(t, f.eventsText(), ReasonDiscarded)

	// A standby that received WAL the new primary never had cannot follow
	// its timeline: once the failover is rejoinAfter old, it is rewound.
	f.agents.SetDiverged(f.db, "orders-2")
	f.run(restarted, 1)
	assert.NotContains(t, f.agents.Calls(), "rejoin orders-2", "rewound before rejoinAfter")
	*clock = st.LastFailover.FinishedAt.Add(rejoinAfter + time.Second)
	f.run(restarted, 1)
	assert.Contains(t, f.agents.Calls(), "rejoin orders-2")
	assert.Contains(t, f.eventsText(), "Warning "+ReasonRejoining+" Rewinding orders-2")
	f.run(restarted, 2)
	assert.Equal(t, []string{"orders-0", "orders-2"}, f.labelled(dbv1.RoleReplica))
	assert.Equal(t, dbv1.ReasonReplicating, f.condition().Reason, f.condition().Message)
}

// TestNoFailover: a Ready primary whose agent does not answer, a paused
// Database and failover switched off keep the primary; the condition says
// why.
func TestNoFailover(t *testing.T) {
	t.Run("status unreadable, pod Ready", func(t *testing.T) {
		f, s := converged(t, 2)
		clock := clocked(s)
		f.agents.SetUnreachable(f.db, "orders-0", true)
		for range 5 {
			*clock = clock.Add(10 * time.Second)
			f.step(s)
		}
		assert.Equal(t, "orders-0", f.get().Status.Replication.CurrentPrimary)
		assert.Nil(t, f.get().Status.Replication.PrimaryLostSince)
		assert.Contains(t, f.condition().Message, "status unreadable, pod Ready: no failover")
	})
	t.Run("paused", func(t *testing.T) {
		f, s := converged(t, 2)
		clock := clocked(s)
		db := f.get()
		db.Spec.Paused = true
		require.NoError(t, f.c.Update(context.Background(), db))
		f.lose("orders-0")
		for range 5 {
			*clock = clock.Add(10 * time.Second)
			f.step(s)
		}
		assert.Equal(t, "orders-0", f.get().Status.Replication.CurrentPrimary)
		assert.Len(t, f.agents.Calls(), 2, "an instance was promoted while paused")
		assert.Equal(t, dbv1.ReasonPaused, f.condition().Reason)
		assert.Contains(t, f.condition().Message, "no failover while paused")
	})
	t.Run("failover false", func(t *testing.T) {
		f, s := converged(t, 2)
		clock := clocked(s)
		db := f.get()
		db.Spec.HighAvailability.Failover = new(bool)
		require.NoError(t, f.c.Update(context.Background(), db))
		f.lose("orders-0")
		for range 5 {
			*clock = clock.Add(10 * time.Second)
			f.step(s)
		}
		assert.Equal(t, "orders-0", f.get().Status.Replication.CurrentPrimary)
		assert.Equal(t, dbv1.ReasonFailoverRefused, f.condition().Reason)
		assert.Contains(t, f.condition().Message, "spec.highAvailability.failover is false")
		assert.Equal(t, map[string]agentapi.Role{"orders-0": agentapi.RolePrimary, "orders-1": agentapi.RoleReplica}, f.agents.Roles(f.db))
	})
}

// TestFailoverNotStartedTwiceFromAStaleRead (issue 28): the reconcile
// after a failover's start may read the Database from a cache that lacks
// that start; the controller reads it from the API server while a
// transition runs, so the failover is not started again (it was, seconds
// later, on the real node: a second detach, a second start, a second
// status write of lastFailover).
func TestFailoverNotStartedTwiceFromAStaleRead(t *testing.T) {
	f, s := converged(t, 3)
	clock := clocked(s)
	f.lose("orders-0")
	f.step(s)
	stale := f.get() // the primary lost, no failover yet
	*clock = clock.Add(11 * time.Second)
	f.step(s) // StartFailover
	started := f.get().Status.Replication.LastFailover
	require.NotNil(t, started)
	f.eventsText()
	_, err := s.Sync(context.Background(), stale)
	require.NoError(t, err)
	assert.NotContains(t, f.eventsText(), ReasonFailoverStarted, "the failover was started again from a stale read")
	assert.Equal(t, started.StartedAt, f.get().Status.Replication.LastFailover.StartedAt)
}
