package agent

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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
		{"never read", leaseObservation{}, 20 * time.Second, false, LeaseDuration},
		{"own lease", seen("db-1", 0, at(0)), 0, true, 0},
		{"its name's, held by the previous pod of that name, just seen", func() leaseObservation {
			o := seen("db-1", 0, at(0))
			o.Record.HolderUID, o.Record.PrevSelf = "uid-old", true
			return o
		}(), 0, false, LeaseDuration},
		{"released", seen("", 0, at(0)), 0, true, 0},
		{"another's, just seen", seen("db-0", 0, at(0)), 0, false, LeaseDuration},
		{"another's, unchanged 14.9s", seen("db-0", 0, at(0)), 14900 * time.Millisecond, false, 100 * time.Millisecond},
		{"another's, unchanged 15s", seen("db-0", 0, at(0)), LeaseDuration, true, 0},
		{"another's with a renewTime long past, just seen", seen("db-0", 0, t0.Add(-time.Hour)), time.Second, false, 14 * time.Second},
		{"another's with a renewTime in the future, unchanged 15s", seen("db-0", 0, t0.Add(time.Hour)), LeaseDuration, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := mayTake("db-1", tc.obs, at(tc.now))
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
	require.Less(LeaseRenewDeadline, LeaseDuration)
	require.Less(LeaseRetryPeriod, LeaseRenewDeadline)
	for _, tc := range []struct {
		name      string
		lastRenew time.Time
		read      *leaseRecord
		now       time.Duration
		fence     bool
	}{
		{"renewed just now", at(0), nil, 0, false},
		{"renewed 10s ago (the deadline)", at(0), nil, LeaseRenewDeadline, false},
		{"renewed 10.001s ago", at(0), nil, LeaseRenewDeadline + time.Millisecond, true},
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
		if taken < 0 && mayTake("db-1", taker, at(d)).May {
			taken = d
		}
	}
	assert.Equal(t, LeaseRenewDeadline+10*time.Millisecond, fenced)
	assert.Equal(t, LeaseDuration, taken)
	assert.GreaterOrEqual(t, taken-fenced, LeaseDuration-LeaseRenewDeadline-10*time.Millisecond)
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
		{"held by the previous pod of its name, renewed while watching", false, prevSelf(0, 2*time.Second), 10 * time.Second, startWait},
		{"held by the previous pod of its name, silent for LeaseDuration: it is dead or fenced", false, prevSelf(0, 0), LeaseDuration, startTake},
		{"released by the primary after it: that one's data is newer", false, released("db-1"), time.Hour, startWait},
		{"another's, unchanged for LeaseDuration: a failover is the operator's", false, seen("db-1", 0, 0), LeaseDuration, startWait},
		{"fenced, own lease: nobody promoted since", true, seen("db-0", 0, 0), 0, startTake},
		{"fenced, released: someone held it since", true, seen("", 0, 0), time.Minute, startWait},
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
