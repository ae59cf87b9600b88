package replication

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
)

var now = time.Date(2026, 12, 4, 17, 0, 0, 0, time.UTC)

// lostDB is a Database of three whose primary orders-0 was last seen at
// 0/1000, lost since lostFor ago (not lost when 0).
func lostDB(lostFor time.Duration, mutate ...func(*dbv1.Database)) *dbv1.Database {
	db := facettest.Database()
	db.Spec.Replicas = ptr.To[int32](3)
	db.Status.Replication = &dbv1.ReplicationStatus{CurrentPrimary: "orders-0", TargetPrimary: "orders-0", SystemID: "7",
		Instances: []dbv1.InstanceStatus{{Name: "orders-0", Role: "primary", CurrentLSN: "0/1000"}}}
	if lostFor > 0 {
		db.Status.Replication.PrimaryLostSince = &metav1.Time{Time: now.Add(-lostFor)}
	}
	for _, m := range mutate {
		m(db)
	}
	return db
}

func gone(ord int) Instance {
	return Instance{Name: "orders-" + string(rune('0'+ord)), Ordinal: ord}
}

func notReady(i Instance) Instance { i.PodReady = false; return i }

// received is a standby that stopped streaming (its primary is lost)
// having received and replayed the given positions.
func received(name, recv, replayed string) *agentapi.Status {
	s := standbyAt(name, recv)
	s.ReplayedLSN, s.WALReceiver = replayed, "waiting"
	return s
}

func withLease(s *agentapi.Status, holder string, held bool) *agentapi.Status {
	s.Lease = &agentapi.LeaseStatus{Holder: holder, Held: held}
	return s
}

func TestDecideFailover(t *testing.T) {
	standbys := []Instance{inst(1, received("orders-1", "0/F00", "0/F00"), ""), inst(2, received("orders-2", "0/E00", "0/E00"), "")}
	with := func(first Instance, rest ...Instance) []Instance {
		if len(rest) == 0 {
			rest = standbys
		}
		return append([]Instance{first}, rest...)
	}
	fenced := &agentapi.Status{Pod: "orders-0", State: agentapi.StateFenced, Role: agentapi.RolePrimary, SystemID: "7", Message: "lease not renewed for 10s"}
	syncRequired := func(names []string, k int32) func(*dbv1.Database) {
		return func(db *dbv1.Database) {
			db.Spec.HighAvailability.Synchronous = &dbv1.SynchronousSpec{Method: dbv1.SynchronousAny, Number: k, DataDurability: dbv1.DataDurabilityRequired}
			db.Status.Replication.Synchronous = &dbv1.SynchronousStatus{Standbys: names, Number: k}
		}
	}
	for name, tc := range map[string]struct {
		db     *dbv1.Database
		insts  []Instance
		action ActionKind
		pod    string
		reason string
		// message is a part of the condition's message
		message string
		check   func(t *testing.T, p Plan)
	}{
		// What a lost primary is.
		"pod deleted: lost, the delay starts": {
			db: lostDB(0), insts: with(gone(0)), reason: dbv1.ReasonPrimaryLost, message: "orders-1 will be promoted in 10s",
			check: func(t *testing.T, p Plan) {
				require.NotNil(t, p.PrimaryLostSince)
				assert.Equal(t, now, p.PrimaryLostSince.Time)
				assert.Equal(t, 10*time.Second, p.Requeue, "the next look is not when the delay ends")
			},
		},
		"pod deleted: the delay has not passed": {
			db: lostDB(9 * time.Second), insts: with(gone(0)), reason: dbv1.ReasonPrimaryLost, message: "in 1s",
			check: func(t *testing.T, p Plan) {
				assert.Equal(t, now.Add(-9*time.Second), p.PrimaryLostSince.Time, "the loss's start moved")
			},
		},
		"pod deleted, the delay passed: the most advanced standby is promoted": {
			db: lostDB(10 * time.Second), insts: with(gone(0)), action: ActStartFailover, pod: "orders-1", reason: dbv1.ReasonFailingOver,
			check: func(t *testing.T, p Plan) {
				assert.Equal(t, "orders-1", p.TargetPrimary)
				assert.Equal(t, "orders-0", p.CurrentPrimary)
				f := p.LastFailover
				require.NotNil(t, f)
				assert.Equal(t, "orders-0", f.From)
				assert.Equal(t, "orders-1", f.To)
				assert.Contains(t, f.Reason, "its pod does not exist")
				assert.Equal(t, now, f.StartedAt.Time)
				assert.Nil(t, f.FinishedAt)
				assert.Equal(t, "0/1000", f.FromLSN)
				assert.Equal(t, "0/F00", f.PromotedLSN)
				assert.Equal(t, int64(0x100), f.LostBytes)
			},
		},
		"pod terminating: lost": {
			db: lostDB(11 * time.Second), insts: with(func() Instance { i := inst(0, nil, ""); i.Terminating = true; return i }()),
			action: ActStartFailover, pod: "orders-1", reason: dbv1.ReasonFailingOver, message: "being deleted",
		},
		"pod not Ready, agent silent: lost": {
			db: lostDB(11 * time.Second), insts: with(notReady(inst(0, nil, "context deadline exceeded"))),
			action: ActStartFailover, pod: "orders-1", message: "does not answer",
		},
		"pod not Ready, server failed: lost": {
			db: lostDB(11 * time.Second), insts: with(notReady(inst(0, &agentapi.Status{State: agentapi.StateFailed, Role: agentapi.RolePrimary, Message: "server exited"}, ""))),
			action: ActStartFailover, pod: "orders-1", message: "server exited",
		},
		"pod not Ready, reports a replica: lost": {
			db: lostDB(11 * time.Second), insts: with(notReady(inst(0, standbyAt("orders-0", "0/1000"), ""))),
			action: ActStartFailover, pod: "orders-1",
		},
		"fenced, pod still Ready: lost": {
			db: lostDB(11 * time.Second), insts: with(inst(0, fenced, "")),
			action: ActStartFailover, pod: "orders-1", message: "fenced",
		},
		"status unreadable, pod Ready: no failover": {
			db: lostDB(30 * time.Second), insts: with(inst(0, nil, "context deadline exceeded")),
			reason: dbv1.ReasonInstanceUnhealthy, message: "status unreadable, pod Ready: no failover",
			check: func(t *testing.T, p Plan) { assert.Nil(t, p.PrimaryLostSince, "a Ready primary counted as lost") },
		},
		"the primary is back: no longer lost": {
			db: lostDB(5 * time.Second), insts: with(inst(0, withLease(primaryAt("orders-0", "0/1000"), "orders-0", true), ""), inst(1, standbyAt("orders-1", "0/1000"), ""), inst(2, standbyAt("orders-2", "0/1000"), "")),
			reason: dbv1.ReasonReplicating,
			check: func(t *testing.T, p Plan) {
				assert.Nil(t, p.PrimaryLostSince)
				assert.Equal(t, dbv1.RolePrimary, p.Labels["orders-0"])
			},
		},

		"an instance already primary with the lease is recorded at once, whatever the settings": {
			db: lostDB(0, func(db *dbv1.Database) { db.Spec.HighAvailability.Failover = ptr.To(false) }),
			insts: with(inst(0, withLease(primaryAt("orders-0", "0/1000"), "orders-1", false), ""),
				inst(1, withLease(primaryAt("orders-1", "0/1100"), "orders-1", true), ""), inst(2, received("orders-2", "0/E00", "0/E00"), "")),
			action: ActStartFailover, pod: "orders-1", reason: dbv1.ReasonFailingOver, message: "orders-1 holds the primary lease",
			check: func(t *testing.T, p Plan) {
				assert.Equal(t, "0/1100", p.LastFailover.PromotedLSN)
				assert.Zero(t, p.LastFailover.LostBytes)
			},
		},

		// Refusals, each naming its field.
		"one replica: no standby": {
			db: lostDB(time.Minute, func(db *dbv1.Database) { db.Spec.Replicas = ptr.To[int32](1) }), insts: []Instance{gone(0)},
			reason: dbv1.ReasonInstanceUnhealthy, message: "no failover: spec.replicas is 1",
		},
		"failover switched off": {
			db: lostDB(time.Minute, func(db *dbv1.Database) { db.Spec.HighAvailability.Failover = ptr.To(false) }), insts: with(gone(0)),
			reason: dbv1.ReasonFailoverRefused, message: "spec.highAvailability.failover is false",
			check: func(t *testing.T, p Plan) { assert.NotNil(t, p.PrimaryLostSince) },
		},
		"full volume (its last answer): no failover": {
			db: lostDB(time.Minute),
			insts: with(func() Instance {
				i := notReady(inst(0, nil, "connection refused"))
				i.LastAnswer = &agentapi.Status{State: agentapi.StateRunning, Role: agentapi.RolePrimary, VolumeFull: true, VolumeAvailableBytes: 4096}
				return i
			}()),
			reason: dbv1.ReasonFailoverRefused, message: "grow spec.storage.size",
		},
		"no candidate": {
			db: lostDB(time.Minute),
			insts: with(gone(0), notReady(inst(1, nil, "connection refused")),
				inst(2, &agentapi.Status{State: agentapi.StateStarting, Role: agentapi.RoleReplica, SystemID: "7"}, "")),
			reason: dbv1.ReasonFailoverRefused, message: "no standby can be promoted",
		},
		"another system's standby is no candidate": {
			db: lostDB(time.Minute),
			insts: with(gone(0), inst(1, func() *agentapi.Status { s := received("orders-1", "0/F00", "0/F00"); s.SystemID = "8"; return s }(), ""),
				inst(2, received("orders-2", "0/E00", "0/E00"), "")),
			action: ActStartFailover, pod: "orders-2",
		},
		"the best candidate lacks more than maxFailoverLag": {
			db:     lostDB(time.Minute, func(db *dbv1.Database) { db.Spec.HighAvailability.MaxFailoverLag = ptr.To(resource.MustParse("128")) }),
			insts:  with(gone(0)),
			reason: dbv1.ReasonFailoverRefused, message: "spec.highAvailability.maxFailoverLag is 128 bytes",
		},
		"maxFailoverLag 0 is no limit": {
			db:     lostDB(time.Minute, func(db *dbv1.Database) { db.Spec.HighAvailability.MaxFailoverLag = ptr.To(resource.MustParse("0")) }),
			insts:  with(gone(0), inst(1, received("orders-1", "0/10", "0/10"), ""), inst(2, received("orders-2", "0/8", "0/8"), "")),
			action: ActStartFailover, pod: "orders-1",
			check: func(t *testing.T, p Plan) { assert.Equal(t, int64(0x1000-0x10), p.LastFailover.LostBytes) },
		},

		// Ranking: received, then replayed, then name.
		"ranked by received position": {
			db: lostDB(time.Minute), insts: with(gone(0), inst(1, received("orders-1", "0/E00", "0/E00"), ""), inst(2, received("orders-2", "0/F00", "0/A00"), "")),
			action: ActStartFailover, pod: "orders-2",
		},
		"then by replayed position": {
			db: lostDB(time.Minute), insts: with(gone(0), inst(1, received("orders-1", "0/F00", "0/A00"), ""), inst(2, received("orders-2", "0/F00", "0/B00"), "")),
			action: ActStartFailover, pod: "orders-2",
		},
		"then by name": {
			db: lostDB(time.Minute), insts: with(gone(0), inst(1, received("orders-1", "0/F00", "0/F00"), ""), inst(2, received("orders-2", "0/F00", "0/F00"), "")),
			action: ActStartFailover, pod: "orders-1",
		},
		"a candidate need not stream": {
			db: lostDB(time.Minute), insts: with(gone(0), inst(1, func() *agentapi.Status { s := received("orders-1", "0/F00", "0/F00"); s.WALReceiver = ""; return s }(), ""), gone(2)),
			action: ActStartFailover, pod: "orders-1",
		},

		// Synchronous Required: |S|-k+1 named standbys must answer.
		"quorum met: the most advanced named standby, not a more advanced unnamed one": {
			db: lostDB(time.Minute, func(db *dbv1.Database) {
				db.Spec.Replicas = ptr.To[int32](4)
				syncRequired([]string{"orders-1", "orders-2"}, 1)(db)
			}),
			insts: with(gone(0), inst(1, received("orders-1", "0/E00", "0/E00"), ""), inst(2, received("orders-2", "0/D00", "0/D00"), ""),
				inst(3, received("orders-3", "0/F00", "0/F00"), "")),
			action: ActStartFailover, pod: "orders-1",
		},
		"quorum: ANY 1 of 2 needs both to answer": {
			db:     lostDB(time.Minute, syncRequired([]string{"orders-1", "orders-2"}, 1)),
			insts:  with(gone(0), inst(1, received("orders-1", "0/F00", "0/F00"), ""), notReady(inst(2, nil, "connection refused"))),
			reason: dbv1.ReasonFailoverRefused, message: "only 1 of the synchronous standbys orders-1, orders-2 can be promoted; 2 are needed",
		},
		"quorum: ANY 2 of 2 needs one": {
			db: lostDB(time.Minute, func(db *dbv1.Database) {
				syncRequired([]string{"orders-1", "orders-2"}, 2)(db)
			}),
			insts:  with(gone(0), inst(1, received("orders-1", "0/F00", "0/F00"), ""), notReady(inst(2, nil, "connection refused"))),
			action: ActStartFailover, pod: "orders-1",
		},
		"Preferred durability needs no quorum": {
			db: lostDB(time.Minute, func(db *dbv1.Database) {
				syncRequired([]string{"orders-1", "orders-2"}, 1)(db)
				db.Spec.HighAvailability.Synchronous.DataDurability = dbv1.DataDurabilityPreferred
			}),
			insts:  with(gone(0), inst(1, received("orders-1", "0/F00", "0/F00"), ""), notReady(inst(2, nil, "connection refused"))),
			action: ActStartFailover, pod: "orders-1",
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
			if tc.action == ActStartFailover {
				assert.Equal(t, "", p.Labels["orders-0"], "the lost primary keeps its role label")
				for pod, role := range p.Labels {
					assert.NotEqual(t, dbv1.RolePrimary, role, "%s labelled primary when a failover starts", pod)
				}
			}
			if tc.check != nil {
				tc.check(t, p)
			}
		})
	}
}

// failingOverDB is a Database whose failover from orders-0 to orders-1
// started a second ago.
func failingOverDB() *dbv1.Database {
	db := lostDB(11 * time.Second)
	r := db.Status.Replication
	r.TargetPrimary = "orders-1"
	r.LastFailover = &dbv1.FailoverStatus{From: "orders-0", To: "orders-1", Reason: "the primary orders-0 was lost",
		StartedAt: metav1.Time{Time: now.Add(-time.Second)}, FromLSN: "0/1000", PromotedLSN: "0/F00", LostBytes: 0x100}
	return db
}

func TestDecideRunningFailover(t *testing.T) {
	promoted := withLease(primaryAt("orders-1", "0/F60"), "orders-1", true)
	promoted.Timeline = 2
	for name, tc := range map[string]struct {
		insts  []Instance
		action ActionKind
		check  func(t *testing.T, p Plan)
	}{
		"the target is asked to promote with failover, no demote": {
			insts:  []Instance{gone(0), inst(1, received("orders-1", "0/F00", "0/F00"), ""), inst(2, received("orders-2", "0/E00", "0/E00"), "")},
			action: ActPromote,
			check: func(t *testing.T, p Plan) {
				assert.True(t, p.Action.Failover)
				assert.Empty(t, p.Action.LSN, "a failover waits for no switchover LSN")
				assert.Equal(t, dbv1.ReasonFailingOver, p.Condition.Reason)
				assert.NotNil(t, p.PrimaryLostSince)
				for pod, role := range p.Labels {
					assert.NotEqual(t, dbv1.RolePrimary, role, "%s labelled primary during a failover", pod)
				}
			},
		},
		"asked again while it promotes": {
			insts: []Instance{gone(0), notReady(inst(1, &agentapi.Status{State: agentapi.StatePromoting, Role: agentapi.RoleReplica, SystemID: "7",
				Lease: &agentapi.LeaseStatus{Holder: "orders-0", UnchangedFor: metav1.Duration{Duration: 5 * time.Second}}}, "")), inst(2, received("orders-2", "0/E00", "0/E00"), "")},
			action: ActPromote,
			check:  func(t *testing.T, p Plan) { assert.True(t, p.Action.Failover) },
		},
		"the target reports primary: finished": {
			insts:  []Instance{gone(0), inst(1, promoted, ""), inst(2, received("orders-2", "0/E00", "0/E00"), "")},
			action: ActFinishFailover,
			check: func(t *testing.T, p Plan) {
				assert.Equal(t, "orders-1", p.CurrentPrimary)
				assert.Equal(t, "orders-1", p.TargetPrimary)
				require.NotNil(t, p.LastFailover.FinishedAt)
				assert.Equal(t, now, p.LastFailover.FinishedAt.Time)
				assert.Nil(t, p.PrimaryLostSince)
				assert.Equal(t, dbv1.RolePrimary, p.Labels["orders-1"])
				assert.Equal(t, "", p.Labels["orders-2"], "a standby not streaming yet labelled replica")
			},
		},
		"finished while the fenced old primary still reports its role": {
			insts: []Instance{inst(0, withLease(&agentapi.Status{State: agentapi.StateFenced, Role: agentapi.RolePrimary, SystemID: "7"}, "orders-1", false), ""),
				inst(1, promoted, ""), inst(2, received("orders-2", "0/E00", "0/E00"), "")},
			action: ActFinishFailover,
			check: func(t *testing.T, p Plan) {
				assert.Equal(t, "", p.Labels["orders-0"], "the fenced former primary is labelled")
				assert.Equal(t, dbv1.RolePrimary, p.Labels["orders-1"])
			},
		},
		"the old primary back with the lease before the promotion: aborted": {
			insts: []Instance{inst(0, withLease(primaryAt("orders-0", "0/1000"), "orders-0", true), ""),
				inst(1, received("orders-1", "0/F00", "0/F00"), ""), inst(2, received("orders-2", "0/E00", "0/E00"), "")},
			action: ActAbortFailover,
			check: func(t *testing.T, p Plan) {
				assert.Equal(t, "orders-0", p.TargetPrimary)
				assert.Equal(t, "orders-0", p.CurrentPrimary)
				assert.Contains(t, p.Condition.Message, "aborted")
				assert.Contains(t, p.LastFailover.Reason, "aborted")
				assert.NotNil(t, p.LastFailover.AbortedAt, "status says the failover was abandoned")
				assert.Nil(t, p.LastFailover.FinishedAt)
				assert.Nil(t, p.PrimaryLostSince)
			},
		},
		"the old primary running without the lease: not aborted, not labelled": {
			insts: []Instance{inst(0, withLease(primaryAt("orders-0", "0/1000"), "orders-0", false), ""),
				inst(1, received("orders-1", "0/F00", "0/F00"), ""), inst(2, received("orders-2", "0/E00", "0/E00"), "")},
			action: ActPromote,
			check:  func(t *testing.T, p Plan) { assert.Equal(t, "", p.Labels["orders-0"]) },
		},
	} {
		t.Run(name, func(t *testing.T) {
			p := Decide(Input{DB: failingOverDB(), Instances: tc.insts, UpdateRevision: "r1", Now: now})
			assert.Equal(t, tc.action, p.Action.Kind, p.Condition.Message)
			tc.check(t, p)
		})
	}
}

// TestPrimaryLabelNeedsTheLease: the primary label goes only to the
// current primary that holds the lease, and the former primary becomes a
// replica only once it streams.
func TestPrimaryLabelNeedsTheLease(t *testing.T) {
	db := lostDB(0)
	db.Spec.Replicas = ptr.To[int32](2)
	p := Decide(Input{DB: db, Now: now, UpdateRevision: "r1", Instances: []Instance{
		inst(0, withLease(primaryAt("orders-0", "0/1000"), "orders-0", false), ""), inst(1, standbyAt("orders-1", "0/1000"), "")}})
	assert.Equal(t, "", p.Labels["orders-0"], "a primary that does not hold the lease is labelled primary")

	p = Decide(Input{DB: db, Now: now, UpdateRevision: "r1", Instances: []Instance{
		inst(0, withLease(primaryAt("orders-0", "0/1000"), "orders-0", true), ""), inst(1, withLease(primaryAt("orders-1", "0/1000"), "orders-0", false), "")}})
	assert.Equal(t, dbv1.RolePrimary, p.Labels["orders-0"])
	assert.Equal(t, "", p.Labels["orders-1"], "an instance that is not currentPrimary is labelled")
}

// TestDiscardedTransactionsCopied: the former primary's rewind after the
// failover started says how many of its transactions were discarded; an
// earlier rewind does not count.
func TestDiscardedTransactionsCopied(t *testing.T) {
	db := failingOverDB()
	finished := metav1.Time{Time: now.Add(-time.Second)}
	db.Status.Replication.LastFailover.FinishedAt = &finished
	db.Status.Replication.CurrentPrimary, db.Status.Replication.PrimaryLostSince = "orders-1", nil
	rejoined := func(at time.Time) *agentapi.Status {
		s := standbyAt("orders-0", "0/F60")
		s.LastRewind = &agentapi.RewindReport{At: metav1.Time{Time: at}, DiscardedTransactions: 3}
		return s
	}
	primary := withLease(primaryAt("orders-1", "0/F60"), "orders-1", true)
	p := Decide(Input{DB: db, Now: now, UpdateRevision: "r1", Instances: []Instance{inst(0, rejoined(now.Add(-time.Hour)), ""), inst(1, primary, ""), inst(2, standbyAt("orders-2", "0/F60"), "")}})
	assert.Nil(t, p.LastFailover.DiscardedTransactions, "a rewind before the failover counted")

	p = Decide(Input{DB: db, Now: now, UpdateRevision: "r1", Instances: []Instance{inst(0, rejoined(now), ""), inst(1, primary, ""), inst(2, standbyAt("orders-2", "0/F60"), "")}})
	require.NotNil(t, p.LastFailover.DiscardedTransactions)
	assert.Equal(t, int64(3), *p.LastFailover.DiscardedTransactions)
	assert.Equal(t, dbv1.RoleReplica, p.Labels["orders-0"], "the former primary streaming again is a replica")
}
