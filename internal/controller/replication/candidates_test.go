package replication

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/instance/agentstest"
)

// TestFailoverCandidates (issue 28, item 3): how the standbys are ranked
// and filtered once they are detached: by received position, else the
// replayed one (a standby that restarted has received nothing since, yet
// replayed its WAL); an unknown position never passes maxFailoverLag; only
// the newest timeline among them, never one behind the lost primary's.
func TestFailoverCandidates(t *testing.T) {
	restarted := func(name, replayed string) *agentapi.Status {
		s := received(name, "", replayed)
		s.WALReceiver = ""
		return s
	}
	onTimeline := func(s *agentapi.Status, tli uint32) *agentapi.Status { s.Timeline = tli; return s }
	primaryTimeline := func(tli int64) func(*dbv1.Database) {
		return func(db *dbv1.Database) { db.Status.Replication.Instances[0].Timeline = tli }
	}
	lag128 := func(db *dbv1.Database) { db.Spec.HighAvailability.MaxFailoverLag = ptr.To(resource.MustParse("128")) }
	for name, tc := range map[string]struct {
		db      *dbv1.Database
		insts   []Instance
		action  ActionKind
		pod     string
		reason  string
		message string
	}{
		"a restarted standby ranks by what it replayed, not as 0": {
			db:     lostDB(time.Minute),
			insts:  []Instance{gone(0), inst(1, restarted("orders-1", "0/F80"), ""), inst(2, received("orders-2", "0/F00", "0/F00"), "")},
			action: ActStartFailover, pod: "orders-1",
		},
		"a restarted standby within maxFailoverLag is not refused": {
			db:     lostDB(time.Minute, lag128),
			insts:  []Instance{gone(0), inst(1, restarted("orders-1", "0/F80"), ""), gone(2)},
			action: ActStartFailover, pod: "orders-1",
		},
		"an unknown position does not pass maxFailoverLag": {
			db:     lostDB(time.Minute, lag128),
			insts:  []Instance{gone(0), inst(1, restarted("orders-1", ""), ""), gone(2)},
			reason: dbv1.ReasonFailoverRefused, message: "orders-1 reports no WAL position",
		},
		"the lost primary's unknown position does not pass maxFailoverLag": {
			db:     lostDB(time.Minute, lag128, func(db *dbv1.Database) { db.Status.Replication.Instances[0].CurrentLSN = "" }),
			insts:  []Instance{gone(0), inst(1, received("orders-1", "0/F00", "0/F00"), ""), gone(2)},
			reason: dbv1.ReasonFailoverRefused, message: "unknown",
		},
		"only the newest timeline among the candidates": {
			db: lostDB(time.Minute),
			insts: []Instance{gone(0), inst(1, onTimeline(received("orders-1", "0/F80", "0/F80"), 1), ""),
				inst(2, onTimeline(received("orders-2", "0/F00", "0/F00"), 2), "")},
			action: ActStartFailover, pod: "orders-2",
		},
		"of two as advanced, the one on a node that stays": {
			db: lostDB(time.Minute),
			insts: []Instance{gone(0), draining(inst(1, received("orders-1", "0/F80", "0/F80"), "")),
				inst(2, received("orders-2", "0/F80", "0/F80"), "")},
			action: ActStartFailover, pod: "orders-2",
		},
		"the most advanced wins although its node is drained": {
			db: lostDB(time.Minute),
			insts: []Instance{gone(0), draining(inst(1, received("orders-1", "0/F80", "0/F80"), "")),
				inst(2, received("orders-2", "0/F00", "0/F00"), "")},
			action: ActStartFailover, pod: "orders-1",
		},
		"no candidate behind the lost primary's timeline": {
			db:     lostDB(time.Minute, primaryTimeline(2)),
			insts:  []Instance{gone(0), inst(1, received("orders-1", "0/F80", "0/F80"), ""), inst(2, received("orders-2", "0/F00", "0/F00"), "")},
			reason: dbv1.ReasonFailoverRefused, message: "behind the lost primary's timeline 2",
		},
	} {
		t.Run(name, func(t *testing.T) {
			p := decideDetached(Input{DB: tc.db, Instances: tc.insts, UpdateRevision: "r1", Now: now})
			assert.Equal(t, tc.action, p.Action.Kind, p.Condition.Message)
			if tc.pod != "" {
				assert.Equal(t, tc.pod, p.Action.Pod)
			}
			if tc.reason != "" {
				assert.Equal(t, tc.reason, p.Condition.Reason, p.Condition.Message)
			}
			assert.Contains(t, p.Condition.Message, tc.message)
		})
	}
}

// draining puts inst on a node being drained.
func draining(inst Instance) Instance {
	inst.Node, inst.NodeDrain = "node-a", "is cordoned (being drained)"
	return inst
}

// decideDetached decides as after every instance was detached.
func decideDetached(in Input) Plan {
	in.Detached = map[string]bool{}
	for _, i := range in.Instances {
		in.Detached[i.Name] = true
	}
	return Decide(in)
}

// TestFailoverDetachesFirst: once the delay has passed, the plan detaches
// every standby that answers (not the lost primary) before any target is
// recorded; a candidate that could not be detached is none.
func TestFailoverDetachesFirst(t *testing.T) {
	insts := []Instance{notReady(inst(0, nil, "context deadline exceeded")), inst(1, received("orders-1", "0/F00", "0/F00"), ""),
		inst(2, received("orders-2", "0/F80", "0/F80"), "")}
	p := Decide(Input{DB: lostDB(time.Minute), Instances: insts, UpdateRevision: "r1", Now: now})
	assert.Equal(t, ActDetach, p.Action.Kind, p.Condition.Message)
	assert.Equal(t, []string{"orders-1", "orders-2"}, p.Action.Pods)
	assert.Nil(t, p.LastFailover, "a target was recorded before the standbys were detached")
	assert.Equal(t, "orders-0", p.TargetPrimary)

	p = Decide(Input{DB: lostDB(time.Minute), Instances: insts, UpdateRevision: "r1", Now: now, Detached: map[string]bool{"orders-1": true}})
	assert.Equal(t, ActStartFailover, p.Action.Kind, p.Condition.Message)
	assert.Equal(t, "orders-1", p.Action.Pod, "a standby that could not be detached was promoted")

	p = Decide(Input{DB: lostDB(5 * time.Second), Instances: insts, UpdateRevision: "r1", Now: now})
	assert.Equal(t, ActNone, p.Action.Kind, "detached before failoverDelay")
	assert.Contains(t, p.Condition.Message, "orders-2 will be promoted in 5s")
}

// TestFailoverRanksAfterDetaching (issue 28, item 3): a standby still
// receiving WAL from the lost primary (which was only frozen) ranks by
// where it stopped once detached, not by what it reported before: the
// target is chosen after every candidate was detached and read again.
func TestFailoverRanksAfterDetaching(t *testing.T) {
	f, s := converged(t, 3)
	h := hooked(f.agents)
	s.agents = h
	clock := clocked(s)
	f.agents.Write(f.db, 0x2000)
	f.step(s)
	pos, err := agentapi.ParseLSN(f.get().Status.Replication.Instances[2].ReceivedLSN)
	require.NoError(t, err)

	f.lose("orders-0")
	// orders-2 receives more from the old primary until it is detached:
	// behind orders-1 before, ahead of it after
	h.setEdit("orders-2", func(st *agentapi.Status, detached bool) {
		if detached {
			st.ReceivedLSN = agentstest.LSN(pos + 0x100)
		} else {
			st.ReceivedLSN = agentstest.LSN(pos - 0x100)
		}
	})
	f.step(s)
	assert.Equal(t, dbv1.ReasonPrimaryLost, f.condition().Reason, f.condition().Message)
	*clock = clock.Add(11 * time.Second)
	f.step(s)
	st := f.get().Status.Replication
	assert.Equal(t, "orders-2", st.TargetPrimary, "the target was ranked on what the standbys reported before they were detached")
	h.mu.Lock()
	assert.True(t, h.detached["orders-1"] && h.detached["orders-2"], "the failover was recorded before every candidate was detached: %v", h.log)
	h.mu.Unlock()
}
