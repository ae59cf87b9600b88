package agent

import (
	"fmt"
	"time"
)

// The lease's rules, without I/O: every decision about the primary lease
// is made here from what the agent read and its own monotonic clock
// (passed in), so that tables can test them.

// leaseRecord is what the agent compares between two reads of the lease:
// a change of any of it restarts a taker's clock.
type leaseRecord struct {
	Holder          string
	RenewTime       time.Time
	ResourceVersion string
	// ReleasedBy is the last holder of a released lease (the annotation
	// AnnotationReleasedBy), empty when it was never held.
	ReleasedBy string
	// HolderUID is the holder's pod UID (AnnotationHolderUID).
	HolderUID string
	// PrevSelf says the holder has this agent's pod name but is another
	// pod (AnnotationHolderUID): one force-deleted or on a lost node,
	// whose server may still run on this very data directory. It is
	// treated as another holder until it released the lease or left it
	// unchanged for LeaseDuration.
	PrevSelf bool
}

// AnnotationHolderUID, on the primary Lease, is the UID of the holder's
// pod.
const AnnotationHolderUID = "database.dbkeeper.io/holder-uid"

// AnnotationReleasedBy, on the primary Lease, names the instance that
// released it: the last primary, whose data is the newest.
const AnnotationReleasedBy = "database.dbkeeper.io/released-by"

// leaseObservation is the last record read and when, on this agent's
// clock, it was first seen as it is.
type leaseObservation struct {
	Record leaseRecord
	// Since is when the record was first seen unchanged; zero before the
	// first read.
	Since time.Time
	// First is when the agent first read the lease: a record that changed
	// after it was seen being renewed.
	First time.Time
}

// observe returns the observation after reading rec at now: the clock
// restarts when the record changed.
func observe(prev leaseObservation, rec leaseRecord, now time.Time) leaseObservation {
	if prev.Since.IsZero() {
		return leaseObservation{Record: rec, Since: now, First: now}
	}
	if prev.Record.Holder != rec.Holder || !prev.Record.RenewTime.Equal(rec.RenewTime) || prev.Record.ResourceVersion != rec.ResourceVersion {
		return leaseObservation{Record: rec, Since: now, First: prev.First}
	}
	return prev
}

// unchangedFor is how long the observed record has been unchanged at now.
func (o leaseObservation) unchangedFor(now time.Time) time.Duration {
	if o.Since.IsZero() {
		return 0
	}
	return now.Sub(o.Since)
}

// takeVerdict is whether an agent may take the lease, and why (not).
type takeVerdict struct {
	May bool
	// Wait is how much longer the record must stay unchanged before it
	// may (zero when May).
	Wait   time.Duration
	Reason string
}

// mayTake says whether self may write itself into the lease it observed:
// it already holds it, the lease is released, or the record has been
// unchanged for LeaseDuration on self's clock (its holder cannot have
// renewed it since, and fenced itself LeaseDuration - LeaseRenewDeadline
// ago). The write itself is conditional on the observed resourceVersion.
func mayTake(self string, o leaseObservation, now time.Time) takeVerdict {
	switch {
	case o.Since.IsZero():
		return takeVerdict{Wait: LeaseDuration, Reason: "the lease was not read yet"}
	case o.Record.Holder == self && !o.Record.PrevSelf:
		return takeVerdict{May: true, Reason: "this instance holds it"}
	case o.Record.Holder == "":
		return takeVerdict{May: true, Reason: "it is released"}
	}
	d := o.unchangedFor(now)
	if d >= LeaseDuration {
		return takeVerdict{May: true, Reason: fmt.Sprintf("%s has not renewed it for %s", o.Record.Holder, d.Round(time.Millisecond))}
	}
	return takeVerdict{Wait: LeaseDuration - d, Reason: fmt.Sprintf("held by %s, unchanged for %s of %s",
		o.Record.Holder, d.Round(time.Second), LeaseDuration)}
}

// fenceVerdict says whether a holder must fence itself, and why.
type fenceVerdict struct {
	Fence  bool
	Reason string
}

// shouldFence says whether an agent that holds (or is taking) the lease
// must stop its server: when its last successful renew began more than
// LeaseRenewDeadline ago (before anyone may take the lease over:
// LeaseDuration > LeaseRenewDeadline), or when a read shows another
// holder. lastRenew is the start of the last successful renew request,
// zero when it never renewed.
func shouldFence(self string, lastRenew time.Time, read *leaseRecord, now time.Time) fenceVerdict {
	if read != nil && read.Holder != "" && (read.Holder != self || read.PrevSelf) {
		return fenceVerdict{Fence: true, Reason: fmt.Sprintf("the primary lease names %s (pod %s)", read.Holder, orNone(read.HolderUID))}
	}
	if lastRenew.IsZero() {
		return fenceVerdict{Fence: true, Reason: "the primary lease was never renewed"}
	}
	if d := now.Sub(lastRenew); d > LeaseRenewDeadline {
		return fenceVerdict{Fence: true, Reason: fmt.Sprintf("the primary lease was last renewed %s ago, more than the renew deadline %s",
			d.Round(time.Millisecond), LeaseRenewDeadline)}
	}
	return fenceVerdict{}
}

// startVerdict is what an agent whose data directory would start as a
// primary does about the lease.
type startVerdict int

const (
	// startTake: take the lease (conditional update), then start as the
	// primary.
	startTake startVerdict = iota
	// startWait: read again; the holder may still be alive.
	startWait
	// startRejoin: another instance holds it: rejoin as its standby.
	startRejoin
)

// decideStart decides, from the observed lease, what a data directory
// that would start as a primary does. fenced says the instance fenced
// itself before (its data directory may be behind the lease's holder's):
// it then takes only a lease that still names it, never a released one
// (another instance held it since, and released it), and rejoins any
// other holder. An instance that was not fenced takes its own, or a
// released one that it released itself or nobody held; it rejoins a
// holder that renews, and waits for one that does not, or for the
// instance that released the lease: that one was the primary after it,
// and starting this older data as the primary would discard that
// primary's commits. Taking a lease over from a silent holder is a
// failover, which only the operator starts (a promote).
func decideStart(self string, fenced bool, o leaseObservation, now time.Time) (startVerdict, string) {
	if o.Since.IsZero() {
		return startWait, "the lease was not read yet"
	}
	h := o.Record.Holder
	if h == self && o.Record.PrevSelf {
		// the pod before this one, of the same name: it stops (its
		// agent releases the lease once its server is down) or is dead.
		if d := o.unchangedFor(now); d >= LeaseDuration {
			return startTake, fmt.Sprintf("the previous pod %s has not renewed it for %s", h, d.Round(time.Millisecond))
		}
		return startWait, fmt.Sprintf("the previous pod named %s holds the lease: waiting for it to release it, or for %s without a renewal", h, LeaseDuration)
	}
	if fenced {
		switch h {
		case self:
			return startTake, "the lease still names this instance: nobody was promoted since it fenced itself"
		case "":
			return startWait, "the lease is released but this instance fenced itself: waiting for another holder to rejoin"
		default:
			return startRejoin, fmt.Sprintf("the lease names %s", h)
		}
	}
	switch {
	case h == self:
		return startTake, "this instance holds it"
	case h == "" && (o.Record.ReleasedBy == "" || o.Record.ReleasedBy == self):
		return startTake, "it is released"
	case h == "":
		return startWait, fmt.Sprintf("the lease was released by %s, the primary after this instance: waiting for it to come back (or for the operator)", o.Record.ReleasedBy)
	case o.Since.After(o.First):
		// the record changed while this agent watched: its holder renews
		// it.
		return startRejoin, fmt.Sprintf("the lease names %s, which renews it", h)
	}
	return startWait, fmt.Sprintf("the lease names %s, unchanged for %s: waiting for it to renew (or for the operator to fail over)",
		h, o.unchangedFor(now).Round(time.Second))
}

func orNone(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
