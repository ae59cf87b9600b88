package replication

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// demotedFor runs a switchover from orders-0 to target up to the demote:
// the old primary is a standby, the target not promoted yet.
func demotedFor(t *testing.T, f *fixture, s *syncer, target string) {
	f.annotate(target)
	f.run(s, 2)
	st := f.get().Status.Replication
	require.NotEmpty(t, st.SwitchoverLSN, "not demoted")
	require.Contains(t, f.agents.Calls(), "demote orders-0")
	require.NotContains(t, f.agents.Calls(), "promote "+target)
}

// TestSwitchoverTargetNeverComesBack (issue 28, item 4): a switchover
// whose target is lost after the primary was demoted does not wait for
// ever without a primary: after the bound, the former primary, which has
// the newest data, is promoted back, or, gone too, the most advanced
// standby left is failed over to.
func TestSwitchoverTargetNeverComesBack(t *testing.T) {
	t.Run("the former primary is promoted back", func(t *testing.T) {
		f, s := converged(t, 3)
		clock := clocked(s)
		demotedFor(t, f, s, "orders-1")
		f.eventsText()
		f.lose("orders-1")
		f.run(s, 3)
		assert.Empty(t, f.labelled(dbv1.RolePrimary))
		assert.Equal(t, dbv1.ReasonSwitchingOver, f.condition().Reason, f.condition().Message)

		*clock = clock.Add(transitionTimeout + time.Second)
		f.run(s, 4)
		st := f.get().Status.Replication
		assert.Equal(t, "orders-0", st.CurrentPrimary)
		assert.Equal(t, []string{"orders-0"}, f.labelled(dbv1.RolePrimary), "no primary: the switchover still waits for its lost target")
		assert.Contains(t, f.agents.Calls(), "promote orders-0 failover")
		require.NotNil(t, st.LastFailover)
		assert.Contains(t, st.LastFailover.Reason, "did not finish")
		assert.Contains(t, f.eventsText(), ReasonSwitchoverFellBack)
		assert.NotContains(t, f.get().Annotations, dbv1.AnnotationSwitchoverTo,
			"the annotation of the switchover that fell back stays: its target's return would start it again")
	})
	t.Run("the former primary gone too: the standby left", func(t *testing.T) {
		f, s := converged(t, 3)
		clock := clocked(s)
		demotedFor(t, f, s, "orders-1")
		f.lose("orders-1")
		f.lose("orders-0")
		f.run(s, 2)
		*clock = clock.Add(transitionTimeout + time.Second)
		f.run(s, 4)
		st := f.get().Status.Replication
		assert.Equal(t, "orders-2", st.CurrentPrimary)
		assert.Equal(t, []string{"orders-2"}, f.labelled(dbv1.RolePrimary))
		require.NotNil(t, st.LastFailover)
		assert.Zero(t, st.LastFailover.LostBytes, "orders-2 received the old primary's shutdown checkpoint")
	})
}

// TestFailoverTargetReplaced (issue 28, item 4): a failover whose target
// is lost before it promoted chooses another among the remaining
// candidates once the bound has passed, and says so.
func TestFailoverTargetReplaced(t *testing.T) {
	f, s := converged(t, 3)
	clock := clocked(s)
	f.lose("orders-0")
	f.step(s)
	*clock = clock.Add(11 * time.Second)
	f.step(s)
	require.Equal(t, "orders-1", f.get().Status.Replication.TargetPrimary)
	f.lose("orders-1")
	f.run(s, 3)
	st := f.get().Status.Replication
	assert.Equal(t, "orders-0", st.CurrentPrimary)
	assert.Contains(t, f.condition().Message, "waiting for orders-1")
	f.eventsText()

	*clock = clock.Add(transitionTimeout + time.Second)
	f.run(s, 4)
	st = f.get().Status.Replication
	assert.Equal(t, "orders-2", st.CurrentPrimary, "the failover still waits for its lost target: %s", f.condition().Message)
	assert.Equal(t, []string{"orders-2"}, f.labelled(dbv1.RolePrimary))
	require.NotNil(t, st.LastFailover)
	assert.Equal(t, "orders-2", st.LastFailover.To)
	assert.Contains(t, st.LastFailover.Reason, "orders-1")
	ev := f.eventsText()
	assert.Contains(t, ev, ReasonFailoverRetargeted)
	assert.True(t, slices.Contains(f.agents.Calls(), "promote orders-2 failover"))
}

// TestDecideSwitchoverFallBack: the fallback of a switchover whose target
// was lost after the demotion, decided from status and answers: the
// former primary first among equals; one that has the shutdown
// checkpoint has every commit, whatever the synchronous quorum; one that
// lacks it is held to the quorum.
func TestDecideSwitchoverFallBack(t *testing.T) {
	demoted := func(mutate ...func(*dbv1.Database)) *dbv1.Database {
		db := lostDB(0, mutate...)
		r := db.Status.Replication
		r.TargetPrimary, r.SwitchoverLSN, r.Synchronous = "orders-1", "0/1000", &dbv1.SynchronousStatus{Standbys: []string{"orders-1", "orders-2"}, Number: 1}
		db.Spec.HighAvailability.Synchronous = &dbv1.SynchronousSpec{Method: dbv1.SynchronousAny, Number: 1, DataDurability: dbv1.DataDurabilityRequired}
		return db
	}
	waited := now.Add(-transitionTimeout)
	for name, tc := range map[string]struct {
		insts   []Instance
		since   time.Time
		action  ActionKind
		pod     string
		message string
	}{
		"before the bound: waiting": {
			insts: []Instance{inst(0, received("orders-0", "0/1000", "0/1000"), ""), gone(1), inst(2, received("orders-2", "0/1000", "0/1000"), "")},
			since: now.Add(-transitionTimeout + time.Second), message: "falls back in 1s",
		},
		"the former primary is promoted back, first among equals, whatever the quorum": {
			insts: []Instance{inst(0, received("orders-0", "", "0/1000"), ""), gone(1), inst(2, received("orders-2", "0/1000", "0/1000"), "")},
			since: waited, action: ActStartFailover, pod: "orders-0", message: "promoted back",
		},
		"the former primary gone: a standby with the shutdown checkpoint has every commit": {
			insts: []Instance{gone(0), gone(1), inst(2, received("orders-2", "0/1000", "0/1000"), "")},
			since: waited, action: ActStartFailover, pod: "orders-2", message: "most advanced instance left",
		},
		"the former primary gone, the standby lacks the checkpoint: held to the quorum": {
			insts: []Instance{gone(0), gone(1), inst(2, received("orders-2", "0/F00", "0/F00"), "")},
			since: waited, message: "only 1 of the synchronous standbys orders-1, orders-2 can be promoted",
		},
	} {
		t.Run(name, func(t *testing.T) {
			p := decideDetached(Input{DB: demoted(), Instances: tc.insts, UpdateRevision: "r1", Now: now, SwitchoverWaitSince: tc.since})
			assert.Equal(t, tc.action, p.Action.Kind, p.Condition.Message)
			assert.Contains(t, p.Condition.Message, tc.message)
			if tc.action == ActStartFailover {
				assert.Equal(t, tc.pod, p.TargetPrimary)
				assert.Equal(t, "orders-1", p.CurrentPrimary, "the fallback is a failover from the target that never became the primary")
				assert.Equal(t, ReasonSwitchoverFellBack, p.Action.EventReason)
				assert.Equal(t, "0/1000", p.LastFailover.FromLSN)
				assert.Zero(t, p.LastFailover.LostBytes)
				for pod, role := range p.Labels {
					assert.NotEqual(t, dbv1.RolePrimary, role, "%s labelled primary", pod)
				}
			}
		})
	}
}
