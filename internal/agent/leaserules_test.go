package agent

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// A record's clock restarts whenever anything of it changes, and only
// then.
func TestObserveRestartsTheClockOnAChange(t *testing.T) {
	rec := leaseRecord{Holder: "db-0", RenewTime: at(0), ResourceVersion: "1"}
	o := observe(leaseObservation{}, rec, at(time.Second))
	assert.Equal(t, at(time.Second), o.Since)
	assert.Equal(t, at(time.Second), o.First)

	o = observe(o, rec, at(5*time.Second))
	assert.Equal(t, at(time.Second), o.Since, "unchanged record")
	assert.Equal(t, 4*time.Second, o.unchangedFor(at(5*time.Second)))

	for name, changed := range map[string]leaseRecord{
		"holder":          {Holder: "db-1", RenewTime: at(0), ResourceVersion: "1"},
		"renewTime":       {Holder: "db-0", RenewTime: at(2 * time.Second), ResourceVersion: "1"},
		"resourceVersion": {Holder: "db-0", RenewTime: at(0), ResourceVersion: "2"},
	} {
		o2 := observe(o, changed, at(7*time.Second))
		assert.Equal(t, at(7*time.Second), o2.Since, "a changed %s restarts the clock", name)
		assert.Equal(t, at(time.Second), o2.First, "the first read stays")
	}
}

// A taker takes its own lease or a released one at once, another's only
// once the record was unchanged for LeaseDuration on its own clock,
// whatever the renewTime in the record says (clocks are not compared).
func TestMayTake(t *testing.T) {
	seen := func(holder string, since time.Duration, renew time.Time) leaseObservation {
		return leaseObservation{Record: leaseRecord{Holder: holder, RenewTime: renew, ResourceVersion: "7"}, Since: at(since), First: at(0)}
	}
	for _, tc := range []struct {
		name string
		obs  leaseObservation
		now  time.Duration
		may  bool
		wait time.Duration
	}{
		{"never read", leaseObservation{}, 20 * time.Second, false, agentapi.LeaseDuration},
		{"own lease", seen("db-1", 0, at(0)), 0, true, 0},
		{"its name's, held by the previous pod of that name, just seen", func() leaseObservation {
			o := seen("db-1", 0, at(0))
			o.Record.HolderUID, o.Record.PrevSelf = "uid-old", true
			return o
		}(), 0, false, agentapi.LeaseDuration},
		{"released", seen("", 0, at(0)), 0, true, 0},
		{"another's, just seen", seen("db-0", 0, at(0)), 0, false, agentapi.LeaseDuration},
		{"another's, unchanged LeaseDuration-100ms", seen("db-0", 0, at(0)), agentapi.LeaseDuration - 100*time.Millisecond, false, 100 * time.Millisecond},
		{"another's, unchanged LeaseDuration", seen("db-0", 0, at(0)), agentapi.LeaseDuration, true, 0},
		{"another's with a renewTime long past, just seen", seen("db-0", 0, t0.Add(-time.Hour)), time.Second, false, agentapi.LeaseDuration - time.Second},
		{"another's with a renewTime in the future, unchanged LeaseDuration", seen("db-0", 0, t0.Add(time.Hour)), agentapi.LeaseDuration, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := mayTake("db-1", tc.obs, failsafeGrant{}, at(tc.now))
			assert.Equal(t, tc.may, v.May, v.Reason)
			assert.Equal(t, tc.wait, v.Wait)
			assert.NotEmpty(t, v.Reason)
		})
	}
}

// A holder fences once its last successful renew began more than the
// renew deadline ago, or at once when the lease names another holder;
// the deadline is shorter than the takeover wait, so it fences first.
func TestShouldFence(t *testing.T) {
	require := assert.New(t)
	require.Less(agentapi.LeaseRenewDeadline, agentapi.LeaseDuration)
	require.Less(agentapi.LeaseRetryPeriod, agentapi.LeaseRenewDeadline)
	for _, tc := range []struct {
		name      string
		lastRenew time.Time
		read      *leaseRecord
		now       time.Duration
		fence     bool
	}{
		{"renewed just now", at(0), nil, 0, false},
		{"renewed 10s ago (the deadline)", at(0), nil, agentapi.LeaseRenewDeadline, false},
		{"renewed 10.001s ago", at(0), nil, agentapi.LeaseRenewDeadline + time.Millisecond, true},
		{"renewed 1s ago, the lease names another holder", at(0), &leaseRecord{Holder: "db-1"}, time.Second, true},
		{"renewed 1s ago, the lease names it", at(0), &leaseRecord{Holder: "db-0"}, time.Second, false},
		{"renewed 1s ago, the lease names another pod of its name", at(0), &leaseRecord{Holder: "db-0", HolderUID: "uid-new", PrevSelf: true}, time.Second, true},
		{"renewed 1s ago, the lease is released", at(0), &leaseRecord{}, time.Second, false},
		{"never renewed", time.Time{}, nil, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := shouldFence("db-0", tc.lastRenew, tc.read, at(tc.now))
			assert.Equal(t, tc.fence, v.Fence, v.Reason)
			if tc.fence {
				assert.NotEmpty(t, v.Reason)
			}
		})
	}
}

// Timing: a holder whose last renew began at r fences by r +
// LeaseRenewDeadline; a taker that saw the record change at s ≥ r takes
// it at s + LeaseDuration at the earliest: after the fence.
func TestFenceComesBeforeTakeover(t *testing.T) {
	r := at(0)
	rec := leaseRecord{Holder: "db-0", RenewTime: r, ResourceVersion: "3"}
	taker := observe(leaseObservation{}, rec, r) // the earliest it can see the renew
	var fenced, taken time.Duration = -1, -1
	for d := time.Duration(0); d <= 30*time.Second; d += 10 * time.Millisecond {
		if fenced < 0 && shouldFence("db-0", r, nil, at(d)).Fence {
			fenced = d
		}
		if taken < 0 && mayTake("db-1", taker, failsafeGrant{}, at(d)).May {
			taken = d
		}
	}
	assert.Equal(t, agentapi.LeaseRenewDeadline+10*time.Millisecond, fenced)
	assert.Equal(t, agentapi.LeaseDuration, taken)
	assert.GreaterOrEqual(t, taken-fenced, agentapi.LeaseDuration-agentapi.LeaseRenewDeadline-10*time.Millisecond)
}

// What a data directory that would start as a primary does about the
// lease.
func TestDecideStart(t *testing.T) {
	seen := func(holder string, first, since time.Duration) leaseObservation {
		return leaseObservation{Record: leaseRecord{Holder: holder, ResourceVersion: "5"}, Since: at(since), First: at(first)}
	}
	prevSelf := func(first, since time.Duration) leaseObservation {
		o := seen("db-0", first, since)
		o.Record.HolderUID, o.Record.PrevSelf = "uid-old", true
		return o
	}
	released := func(by string) leaseObservation {
		o := seen("", 0, 0)
		o.Record.ReleasedBy = by
		return o
	}
	for _, tc := range []struct {
		name   string
		fenced bool
		obs    leaseObservation
		now    time.Duration
		want   startVerdict
	}{
		{"not read yet", false, leaseObservation{}, 0, startWait},
		{"own lease (a crash restart)", false, seen("db-0", 0, 0), 0, startTake},
		{"released (a switchover's or pod deletion's release, a new Database)", false, seen("", 0, 0), 0, startTake},
		{"another's, just started watching", false, seen("db-1", 0, 0), 3 * time.Second, startWait},
		{"another's, renewed while watching", false, seen("db-1", 0, 2*time.Second), 3 * time.Second, startRejoin},
		{"released by itself (its own pod deletion)", false, released("db-0"), 0, startTake},
		{"held by the previous pod of its name (force-deleted): its server may still run", false, prevSelf(0, 0), 3 * time.Second, startWait},
		{"held by the previous pod of its name, renewed while watching", false, prevSelf(0, 2*time.Second), 2*time.Second + agentapi.LeaseDuration - time.Millisecond, startWait},
		{"held by the previous pod of its name, silent for LeaseDuration: it is dead or fenced", false, prevSelf(0, 0), agentapi.LeaseDuration, startTake},
		{"released by the primary after it: that one's data is newer", false, released("db-1"), time.Hour, startWait},
		{"another's, unchanged for LeaseDuration: a failover is the operator's", false, seen("db-1", 0, 0), agentapi.LeaseDuration, startWait},
		{"fenced, own lease: nobody promoted since", true, seen("db-0", 0, 0), 0, startTake},
		{"fenced, released: someone held it since", true, seen("", 0, 0), time.Minute, startWait},
		{"fenced, released by another: that one held it since", true, released("db-1"), time.Minute, startWait},
		{"fenced, released by itself: nobody held it since", true, released("db-0"), 0, startTake},
		{"fenced, another's", true, seen("db-1", 0, 0), 0, startRejoin},
		{"fenced, another's unchanged for long", true, seen("db-1", 0, 0), time.Hour, startRejoin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, why := decideStart("db-0", tc.fenced, tc.obs, at(tc.now))
			assert.Equal(t, tc.want, v, why)
			assert.NotEmpty(t, why)
		})
	}
}

// Only a member (AnnotationMembers) takes a lease another holds or
// nobody holds; a Lease without the annotation (made before it) lets
// anyone, and a holder's own lease is always its own.
func TestMayTakeOnlyAsAMember(t *testing.T) {
	seen := func(holder string, members ...string) leaseObservation {
		o := leaseObservation{Record: leaseRecord{Holder: holder, ResourceVersion: "7"}, Since: at(0), First: at(0)}
		if members != nil {
			o.Record.Members, o.Record.HasMembers = members, true
		}
		return o
	}
	for _, tc := range []struct {
		name string
		obs  leaseObservation
		may  bool
	}{
		{"released, no members annotation", seen(""), true},
		{"released, names it", seen("", "db-0", "db-1"), true},
		{"released, does not name it", seen("", "db-0", "db-2"), false},
		{"released, names nobody", seen("", []string{}...), false},
		{"another's silent for LeaseDuration, no members annotation", seen("db-0"), true},
		{"another's silent for LeaseDuration, names it", seen("db-0", "db-0", "db-1"), true},
		{"another's silent for LeaseDuration, does not name it", seen("db-0", "db-0", "db-2"), false},
		{"its own, does not name it", seen("db-1", "db-0"), true},
		{"its name's, held by the previous pod of that name, not named", func() leaseObservation {
			o := seen("db-1", "db-0")
			o.Record.HolderUID, o.Record.PrevSelf = "uid-old", true
			return o
		}(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := mayTake("db-1", tc.obs, failsafeGrant{}, at(agentapi.LeaseDuration))
			assert.Equal(t, tc.may, v.May, v.Reason)
			if !tc.may {
				assert.Contains(t, v.Reason, "do not include this instance")
			}
		})
	}
	assert.Equal(t, []string{"db-0", "db-1"}, parseMembers(" db-0, ,db-1,"))
	assert.Empty(t, parseMembers(""))
}

// A member that confirmed a primary's failsafe at g.At takes no lease,
// not even a released one or its own, until g.At + LeaseDuration on its
// clock, and says why.
func TestMayTakeRefusesDuringAFailsafeConfirmation(t *testing.T) {
	g := failsafeGrant{Caller: "db-0", At: at(time.Hour)}
	for _, tc := range []struct {
		name   string
		holder string
		now    time.Duration
		may    bool
	}{
		{"another's, silent for an hour, just confirmed", "db-0", time.Hour, false},
		{"another's, silent for an hour, confirmed 3 s ago", "db-0", time.Hour + 3*time.Second, false},
		{"another's, silent for an hour, confirmed LeaseDuration-1ms ago", "db-0", time.Hour + agentapi.LeaseDuration - time.Millisecond, false},
		{"another's, silent for an hour, confirmed LeaseDuration ago", "db-0", time.Hour + agentapi.LeaseDuration, true},
		{"released, confirmed 3 s ago", "", time.Hour + 3*time.Second, false},
		{"released, confirmed LeaseDuration ago", "", time.Hour + agentapi.LeaseDuration, true},
		{"its own, confirmed 3 s ago", "db-1", time.Hour + 3*time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := leaseObservation{Record: leaseRecord{Holder: tc.holder, ResourceVersion: "7"}, Since: at(0), First: at(0)}
			v := mayTake("db-1", o, g, at(tc.now))
			assert.Equal(t, tc.may, v.May, v.Reason)
			if !tc.may {
				assert.Contains(t, v.Reason, "db-0 is serving in failsafe: it checked in ")
				assert.Equal(t, g.At.Add(agentapi.LeaseDuration).Sub(at(tc.now)), v.Wait)
			}
		})
	}
	v := mayTake("db-1", leaseObservation{Record: leaseRecord{Holder: "db-0"}, Since: at(0), First: at(0)}, g, at(time.Hour+3*time.Second))
	assert.Equal(t, "db-0 is serving in failsafe: it checked in 3s ago", v.Reason)
}

// A holder fences when neither its last renew nor the last round in
// which every other member confirmed it began within the renew deadline.
func TestShouldFenceAt(t *testing.T) {
	rd := agentapi.LeaseRenewDeadline
	require.GreaterOrEqual(t, rd, 3*time.Second, "the rows below need a deadline of 3 s at least")
	for _, tc := range []struct {
		name                     string
		lastRenew, lastConfirmed time.Duration
		none                     bool // no round confirmed
		now                      time.Duration
		fence, failsafe          bool
	}{
		{"renewed the deadline ago, never confirmed", 0, 0, true, rd, false, false},
		{"renewed the deadline+1ms ago, never confirmed", 0, 0, true, rd + time.Millisecond, true, false},
		{"renewed 30s ago, confirmed the deadline ago", 0, 30*time.Second - rd, false, 30 * time.Second, false, true},
		{"renewed 30s ago, confirmed the deadline+1ms ago", 0, 30*time.Second - rd, false, 30*time.Second + time.Millisecond, true, false},
		{"renewed just under the deadline ago, confirmed 1s ago", 0, rd - 2*time.Second, false, rd - time.Second, false, false},
		{"renewed the deadline+1s ago, confirmed before that renew", 2 * time.Second, time.Second, false, rd + 3*time.Second, true, false},
		{"renewed the deadline+1s ago, confirmed the deadline-1s ago", 0, 2 * time.Second, false, rd + time.Second, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			confirmed := at(tc.lastConfirmed)
			if tc.none {
				confirmed = time.Time{}
			}
			v := shouldFenceAt(at(tc.lastRenew), confirmed, at(tc.now))
			assert.Equal(t, tc.fence, v.Fence, v.Reason)
			if tc.fence {
				assert.Contains(t, v.Reason, "renew deadline")
			}
			assert.Equal(t, tc.failsafe, servingInFailsafe(at(tc.lastRenew), confirmed, at(tc.now)))
		})
	}
}

// Timing of the failsafe: a round begins at r; a member answers at
// a ∈ [r, r + failsafeRequestTimeout] and takes nothing before a +
// LeaseDuration, even a record silent for an hour; the primary, unless a
// later round or renew succeeds, fences by r + LeaseRenewDeadline. The
// same 5 s margin as the Lease's timing rule.
func TestFailsafeComesBeforeTakeover(t *testing.T) {
	r := at(time.Hour)
	silent := leaseObservation{Record: leaseRecord{Holder: "db-0", ResourceVersion: "3"}, Since: at(0), First: at(0)}
	for _, delay := range []time.Duration{0, 300 * time.Millisecond, failsafeRequestTimeout} {
		g := failsafeGrant{Caller: "db-0", At: r.Add(delay)}
		var fenced, taken time.Duration = -1, -1
		for d := time.Duration(0); d <= 30*time.Second; d += 10 * time.Millisecond {
			if fenced < 0 && shouldFenceAt(at(0), r, r.Add(d)).Fence {
				fenced = d
			}
			if taken < 0 && mayTake("db-1", silent, g, r.Add(d)).May {
				taken = d
			}
		}
		assert.Equal(t, agentapi.LeaseRenewDeadline+10*time.Millisecond, fenced, "answer %s after the round began", delay)
		assert.Equal(t, agentapi.LeaseDuration+delay, taken)
		assert.GreaterOrEqual(t, taken-fenced, agentapi.LeaseDuration-agentapi.LeaseRenewDeadline-10*time.Millisecond)
	}
}

// A member confirms a primary's failsafe only when it is not and is not
// becoming a primary and its last read of the lease names that pod and
// no member the primary did not ask.
func TestAnswerFailsafe(t *testing.T) {
	req := agentapi.FailsafeRequest{Pod: "db-0", HolderUID: "uid-0", ResourceVersion: "9", Members: []string{"db-0", "db-1", "db-2"}}
	read := func(holder, uid string, members ...string) leaseObservation {
		rec := leaseRecord{Holder: holder, HolderUID: uid, ResourceVersion: "9"}
		if members != nil {
			rec.Members, rec.HasMembers = members, true
		}
		return leaseObservation{Record: rec, Since: at(0), First: at(0)}
	}
	named := read("db-0", "uid-0", "db-0", "db-1", "db-2")
	for _, tc := range []struct {
		name string
		req  agentapi.FailsafeRequest
		m    memberState
		ok   bool
		why  string
	}{
		{"a standby whose read names the primary", req, memberState{Obs: named}, true, "names db-0"},
		{"a standby that never read the lease", req, memberState{}, true, "never read"},
		{"a read without a holder UID", req, memberState{Obs: read("db-0", "", "db-0", "db-1")}, true, "names db-0"},
		{"a read of a scale-down the primary has not seen", req, memberState{Obs: read("db-0", "uid-0", "db-0", "db-1")}, true, "names db-0"},
		{"it holds the lease", req, memberState{Holding: true, Obs: named}, false, "holds the primary lease"},
		{"a take's write is in flight", req, memberState{Taking: true, Obs: named}, false, "taking the primary lease"},
		{"it promotes", req, memberState{Promoting: true, Obs: named}, false, "promoting"},
		{"it runs as a primary", req, memberState{Primary: true, Obs: named}, false, "runs as a primary"},
		{"its read names another holder", req, memberState{Obs: read("db-2", "uid-2", "db-0", "db-1", "db-2")}, false, "the lease names db-2"},
		{"its read is released", req, memberState{Obs: read("", "", "db-0", "db-1", "db-2")}, false, "released"},
		{"its read names another pod of the name", req, memberState{Obs: read("db-0", "uid-new", "db-0", "db-1", "db-2")}, false, "another pod of the name db-0"},
		{"its read names a member the primary did not ask", req, memberState{Obs: read("db-0", "uid-0", "db-0", "db-1", "db-2", "db-3")}, false, "did not ask: db-3"},
		{"the request names itself", agentapi.FailsafeRequest{Pod: "db-1"}, memberState{Obs: named}, false, "not another instance"},
		{"the request names nobody", agentapi.FailsafeRequest{}, memberState{Obs: named}, false, "not another instance"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := answerFailsafe("db-1", tc.req, tc.m)
			assert.Equal(t, tc.ok, ok, why)
			assert.Contains(t, why, tc.why)
		})
	}
}

// A fenced primary takes its lease back only when nobody took it since.
func TestMayServeAgain(t *testing.T) {
	for _, tc := range []struct {
		name string
		rec  leaseRecord
		ok   bool
	}{
		{"it still names it", leaseRecord{Holder: "db-0"}, true},
		{"it still names it, with its UID", leaseRecord{Holder: "db-0", HolderUID: "uid-0"}, true},
		{"it names another pod of its name", leaseRecord{Holder: "db-0", HolderUID: "uid-new", PrevSelf: true}, false},
		{"it released it itself", leaseRecord{ReleasedBy: "db-0"}, true},
		{"another released it", leaseRecord{ReleasedBy: "db-1"}, false},
		{"released, never held", leaseRecord{}, false},
		{"another holds it", leaseRecord{Holder: "db-1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := mayServeAgain("db-0", tc.rec)
			assert.Equal(t, tc.ok, ok, why)
			assert.NotEmpty(t, why)
		})
	}
}

// pg_rewind's and pg_waldump's output.
func TestParseRewindOutput(t *testing.T) {
	lsn, tli, ok := parseDivergence("pg_rewind: servers diverged at WAL location 0/3000148 on timeline 1\npg_rewind: rewinding from last common checkpoint at 0/3000098 on timeline 1\n")
	assert.True(t, ok)
	assert.Equal(t, "0/3000148", lsn)
	assert.EqualValues(t, 1, tli)
	_, _, ok = parseDivergence("pg_rewind: source and target cluster are on the same timeline\npg_rewind: no rewind required\n")
	assert.False(t, ok)

	out := `rmgr: Heap        len (rec/tot):     54/    54, tx:        750, lsn: 0/03000148, prev 0/03000110, desc: INSERT off: 3, flags: 0x08, blkref #0: rel 1663/5/16384 blk 0
rmgr: Transaction len (rec/tot):     34/    34, tx:        750, lsn: 0/03000180, prev 0/03000148, desc: COMMIT 2026-12-04 17:00:00.000000 UTC
rmgr: Transaction len (rec/tot):     34/    34, tx:        751, lsn: 0/030001A8, prev 0/03000180, desc: ABORT 2026-12-04 17:00:00.000000 UTC
rmgr: Transaction len (rec/tot):     34/    34, tx:        752, lsn: 0/030001D0, prev 0/030001A8, desc: COMMIT 2026-12-04 17:00:01.000000 UTC; inval msgs: catcache 7
rmgr: Standby     len (rec/tot):     50/    50, tx:          0, lsn: 0/03000208, prev 0/030001D0, desc: RUNNING_XACTS nextXid 753
`
	n, end := countCommitRecords(out)
	assert.EqualValues(t, 2, n, "two commits, an abort")
	assert.Equal(t, "0/03000208", end)
}
