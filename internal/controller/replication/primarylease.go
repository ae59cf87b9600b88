package replication

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// LeaseView is the primary Lease as this manager watched it: its holder
// and how long its record (holder, renew time, resourceVersion) has been
// the same on this manager's clock. As with the agents' takeover rule
// (internal/agent/leaserules.go), no clock is compared with another
// machine's: a record unchanged for agentapi.LeaseDuration since this
// manager first saw it cannot have been renewed since.
type LeaseView struct {
	Holder       string
	UnchangedFor time.Duration
	// SeenBy names the standby whose agent saw it so, "" for this
	// manager.
	SeenBy string
}

// leaseEvidence is the longest silence of the primary Lease held by
// primary, as this manager watched it (mine, nil when not read) or as a
// standby's agent reports it on its own clock (every agent reads the
// Lease every second, standbys too): the standbys' clocks started at the
// last renew, this manager's only at its first poll without an answer,
// seconds later. Each is a duration on one clock, never a comparison of
// two, so the Lease rule holds for each.
func leaseEvidence(mine *LeaseView, byName map[string]*Instance, primary string) *LeaseView {
	best := mine
	for name, inst := range byName {
		if name == primary || inst.Agent == nil || inst.Agent.Lease == nil {
			continue
		}
		l := inst.Agent.Lease
		if l.Holder != primary || l.Held || l.Error != "" {
			continue
		}
		if best == nil || l.UnchangedFor.Duration > best.UnchangedFor ||
			(l.UnchangedFor.Duration == best.UnchangedFor && best.SeenBy != "" && name < best.SeenBy) {
			best = &LeaseView{Holder: primary, UnchangedFor: l.UnchangedFor.Duration, SeenBy: name}
		}
	}
	return best
}

// leaseMark is the record last seen and since when, on this manager's
// clock.
type leaseMark struct {
	holder, renewed, resourceVersion string
	since                            time.Time
}

// watchPrimaryLease reads the Database's primary Lease (the one the
// operator creates, <name>-primary) from the API server and returns it as
// watched so far; nil when it cannot be read. It is read only while the
// current primary's agent does not answer (forgetLease otherwise), so
// the clock starts at the first such poll.
func (s *syncer) watchPrimaryLease(ctx context.Context, db *dbv1.Database) *LeaseView {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	l := &coordinationv1.Lease{}
	if err := s.reader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: resources.LeaseName(db)}, l); err != nil {
		log.FromContext(ctx).V(1).Info("Cannot read the primary Lease", "lease", resources.LeaseName(db), "error", err.Error())
		return nil
	}
	now := s.now()
	mark := leaseMark{resourceVersion: l.ResourceVersion, since: now}
	if l.Spec.HolderIdentity != nil {
		mark.holder = *l.Spec.HolderIdentity
	}
	if l.Spec.RenewTime != nil {
		mark.renewed = l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
	}
	if v, ok := s.leases.Load(db.UID); ok {
		if prev := v.(leaseMark); prev.holder == mark.holder && prev.renewed == mark.renewed && prev.resourceVersion == mark.resourceVersion {
			mark.since = prev.since
		}
	}
	s.leases.Store(db.UID, mark)
	return &LeaseView{Holder: mark.holder, UnchangedFor: now.Sub(mark.since)}
}

// forgetLease forgets the Lease watched for db: its primary answered.
func (s *syncer) forgetLease(db *dbv1.Database) { s.leases.Delete(db.UID) }
