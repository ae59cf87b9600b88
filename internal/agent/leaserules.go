package agent

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
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
	// Members are the instances AnnotationMembers names; HasMembers says
	// the Lease carries the annotation (a Lease made before it has none).
	Members    []string
	HasMembers bool
}

// names says whether pod may take the lease from another holder: the
// Lease names no members (made before AnnotationMembers) or names pod.
func (r leaseRecord) names(pod string) bool {
	return !r.HasMembers || slices.Contains(r.Members, pod)
}

// parseMembers is the list of AnnotationMembers' value.
func parseMembers(v string) []string {
	var members []string
	for _, m := range strings.Split(v, ",") {
		if m = strings.TrimSpace(m); m != "" {
			members = append(members, m)
		}
	}
	return members
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
	// what does not restart the clock is still the latest (members).
	prev.Record = rec
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
// Two more rules: an instance that confirmed a primary's failsafe (g)
// takes nothing for LeaseDuration after it confirmed, and only a member
// (AnnotationMembers) takes a lease another holds or nobody holds.
func mayTake(self string, o leaseObservation, g failsafeGrant, now time.Time) takeVerdict {
	switch {
	case o.Since.IsZero():
		return takeVerdict{Wait: agentapi.LeaseDuration, Reason: "the lease was not read yet"}
	case g.active(now):
		return takeVerdict{Wait: g.until().Sub(now), Reason: fmt.Sprintf("%s is serving in failsafe: it checked in %s ago",
			g.Caller, now.Sub(g.At).Round(time.Second))}
	case o.Record.Holder == self && !o.Record.PrevSelf:
		return takeVerdict{May: true, Reason: "this instance holds it"}
	case !o.Record.names(self):
		return takeVerdict{Reason: fmt.Sprintf("the lease's members (%s) do not include this instance", strings.Join(o.Record.Members, ", "))}
	case o.Record.Holder == "":
		return takeVerdict{May: true, Reason: "it is released"}
	}
	d := o.unchangedFor(now)
	if d >= agentapi.LeaseDuration {
		return takeVerdict{May: true, Reason: fmt.Sprintf("%s has not renewed it for %s", o.Record.Holder, d.Round(time.Millisecond))}
	}
	return takeVerdict{Wait: agentapi.LeaseDuration - d, Reason: fmt.Sprintf("held by %s, unchanged for %s of %s",
		o.Record.Holder, d.Round(time.Second), agentapi.LeaseDuration)}
}

// mayServeAgain says whether a primary that fenced itself may take the
// lease back and serve again on its data directory: the lease still
// names it (this pod, not another of its name), or it released the lease
// itself and nobody held it since. Nobody was promoted in between, so
// its data is the newest.
func mayServeAgain(self string, r leaseRecord) (bool, string) {
	switch {
	case r.Holder == self && !r.PrevSelf:
		return true, "the lease still names this instance: nobody was promoted since it fenced itself"
	case r.Holder == "" && r.ReleasedBy == self:
		return true, "this instance released the lease and nobody held it since"
	case r.Holder == "":
		return false, fmt.Sprintf("the lease was released by %s", orNone(r.ReleasedBy))
	case r.Holder == self:
		return false, fmt.Sprintf("the lease names another pod of this name (pod %s)", orNone(r.HolderUID))
	}
	return false, fmt.Sprintf("the lease names %s", r.Holder)
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
	if d := now.Sub(lastRenew); d > agentapi.LeaseRenewDeadline {
		return fenceVerdict{Fence: true, Reason: fmt.Sprintf("the primary lease was last renewed %s ago, more than the renew deadline %s",
			d.Round(time.Millisecond), agentapi.LeaseRenewDeadline)}
	}
	return fenceVerdict{}
}

// shouldFenceAt is shouldFence by time for a holder whose renews may
// fail while the API server does not answer: it fences when neither its
// last successful renew nor the last failsafe round in which every other
// member confirmed it (lastConfirmed, zero when none) began within
// LeaseRenewDeadline. A member that confirmed takes nothing for
// LeaseDuration after it answered, which was after the round began
// (failsafeGrant): the Lease's timing rule, with the round in place of
// the renew.
func shouldFenceAt(lastRenew, lastConfirmed, now time.Time) fenceVerdict {
	if lastConfirmed.After(lastRenew) && now.Sub(lastConfirmed) <= agentapi.LeaseRenewDeadline {
		return fenceVerdict{}
	}
	v := shouldFence("", lastRenew, nil, now)
	if v.Fence && !lastConfirmed.IsZero() {
		v.Reason += fmt.Sprintf("; every member last confirmed it %s ago", now.Sub(lastConfirmed).Round(time.Millisecond))
	}
	return v
}

// servingInFailsafe says whether a holder that does not fence at now
// (shouldFenceAt) serves on the members' confirmations alone: its renew
// deadline passed.
func servingInFailsafe(lastRenew, lastConfirmed, now time.Time) bool {
	return now.Sub(lastRenew) > agentapi.LeaseRenewDeadline && !shouldFenceAt(lastRenew, lastConfirmed, now).Fence
}

// failsafeGrant is this instance's last confirmation that a primary
// (Caller) may serve without the API server, at At on its own clock: it
// takes no lease until At + LeaseDuration.
type failsafeGrant struct {
	Caller string
	At     time.Time
}

func (g failsafeGrant) until() time.Time { return g.At.Add(agentapi.LeaseDuration) }

// active says the grant still forbids taking the lease at now.
func (g failsafeGrant) active(now time.Time) bool {
	return !g.At.IsZero() && now.Before(g.until())
}

// memberState is what a member knows of itself when a primary asks it to
// confirm its failsafe.
type memberState struct {
	// Holding: it holds the lease; Taking: a take's write is in flight.
	Holding, Taking bool
	// Promoting: a promote runs; Primary: its server runs as a primary.
	Promoting, Primary bool
	// Obs is its last read of the lease (Since zero: it never read it).
	Obs leaseObservation
}

// answerFailsafe says whether member self confirms that the primary of
// req may go on serving without the API server, and why (not): only a
// member that is not, and is not becoming, a primary, whose last read of
// the lease (if any) names that very pod as the holder and no member the
// primary did not ask (AnnotationMembers written since its last read).
func answerFailsafe(self string, req agentapi.FailsafeRequest, m memberState) (bool, string) {
	rec := m.Obs.Record
	switch {
	case req.Pod == "" || req.Pod == self:
		return false, fmt.Sprintf("the request names %q, not another instance", req.Pod)
	case m.Holding:
		return false, "this instance holds the primary lease"
	case m.Taking:
		return false, "this instance is taking the primary lease"
	case m.Promoting:
		return false, "this instance is promoting"
	case m.Primary:
		return false, "this instance runs as a primary"
	case m.Obs.Since.IsZero():
		return true, fmt.Sprintf("this instance never read the lease; %s may serve", req.Pod)
	case rec.Holder == "":
		return false, fmt.Sprintf("the lease was released by %s", orNone(rec.ReleasedBy))
	case rec.Holder != req.Pod:
		return false, fmt.Sprintf("the lease names %s", rec.Holder)
	case rec.HolderUID != "" && req.HolderUID != "" && rec.HolderUID != req.HolderUID:
		return false, fmt.Sprintf("the lease names another pod of the name %s (pod %s, not %s)", rec.Holder, rec.HolderUID, req.HolderUID)
	}
	var unasked []string
	for _, m := range rec.Members {
		if m != req.Pod && !slices.Contains(req.Members, m) {
			unasked = append(unasked, m)
		}
	}
	if len(unasked) > 0 {
		return false, fmt.Sprintf("the lease names members %s did not ask: %s", req.Pod, strings.Join(unasked, ", "))
	}
	return true, fmt.Sprintf("the lease names %s", req.Pod)
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
// it then takes only a lease that still names it or that it released
// itself (mayServeAgain), never one another instance released (that one
// held it since), and rejoins any other holder. An instance that was not fenced takes its own, or a
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
		if d := o.unchangedFor(now); d >= agentapi.LeaseDuration {
			return startTake, fmt.Sprintf("the previous pod %s has not renewed it for %s", h, d.Round(time.Millisecond))
		}
		return startWait, fmt.Sprintf("the previous pod named %s holds the lease: waiting for it to release it, or for %s without a renewal", h, agentapi.LeaseDuration)
	}
	if fenced {
		if ok, why := mayServeAgain(self, o.Record); ok {
			return startTake, why
		}
		if h == "" {
			return startWait, fmt.Sprintf("the lease was released by %s but this instance fenced itself: waiting for another holder to rejoin", orNone(o.Record.ReleasedBy))
		}
		return startRejoin, fmt.Sprintf("the lease names %s", h)
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
