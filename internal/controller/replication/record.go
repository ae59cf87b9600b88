package replication

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
)

// recordFirst writes status first where it guards what follows: the
// switchover's or failover's target is recorded before anything is
// demoted or promoted (done: the step ends there), the new primary before
// the labels and SQL follow it (the db returned has it). It emits the
// Events of starts and aborts.
func (s *syncer) recordFirst(ctx context.Context, db *dbv1.Database, plan Plan, out *facet.Outcome) (*dbv1.Database, bool, error) {
	switch plan.Action.Kind {
	case ActStartSwitchover:
		return db, true, s.recordSwitchoverStart(ctx, db, plan, out)
	case ActStartFailover:
		return db, true, s.recordFailoverStart(ctx, db, plan, out)
	case ActAbortFailover:
		s.started.Delete(db.UID)
		s.writer.Eventf(db, nil, corev1.EventTypeWarning, ReasonFailoverAborted, "Failover",
			"Gave up the failover from %s to %s: %s", plan.Action.From, plan.Action.Pod, plan.Action.Why)
	case ActAbortSwitchover:
		s.started.Delete(db.UID)
		s.writer.Eventf(db, nil, corev1.EventTypeWarning, ReasonSwitchoverAbandoned, "Switchover",
			"Gave up the switchover from %s to %s before demoting anything: %s", plan.Action.From, plan.Action.Pod, plan.Action.Why)
	case ActFinishSwitchover, ActRecordLSN, ActFinishFailover:
		db, err := s.recordPrimary(ctx, db, plan, out)
		return db, false, err
	}
	return db, false, nil
}

// recordSwitchoverStart records a switchover's target.
func (s *syncer) recordSwitchoverStart(ctx context.Context, db *dbv1.Database, plan Plan, out *facet.Outcome) error {
	s.started.Store(db.UID, s.now())
	if err := s.writer.ApplyCondition(ctx, db, plan.Condition, out.Status); err != nil {
		return err
	}
	s.writer.Eventf(db, nil, corev1.EventTypeNormal, ReasonSwitchoverStarted, "Switchover",
		"Switching over from %s to %s: %s", plan.Action.From, plan.Action.Pod, plan.Action.Why)
	out.RequeueAfter = pollSwitchover
	return nil
}

// recordFailoverStart records a failover's target (status.replication.
// lastFailover).
func (s *syncer) recordFailoverStart(ctx context.Context, db *dbv1.Database, plan Plan, out *facet.Outcome) error {
	s.started.Store(db.UID, s.now())
	if err := s.writer.ApplyCondition(ctx, db, plan.Condition, out.Status); err != nil {
		return err
	}
	f := plan.LastFailover
	log.FromContext(ctx).Info("Starting failover", "from", f.From, "to", f.To, "fromLSN", f.FromLSN, "promotedLSN", f.PromotedLSN, "lostBytes", f.LostBytes, "reason", f.Reason)
	reason := ReasonFailoverStarted
	if plan.Action.EventReason != "" {
		reason = plan.Action.EventReason
	}
	s.writer.Eventf(db, nil, corev1.EventTypeWarning, reason, "Failover",
		"Failing over from %s to %s: %s; %s received %s, %s was last seen at %s (%d bytes lacked)",
		f.From, f.To, f.Reason, f.To, f.PromotedLSN, f.From, orUnknown(f.FromLSN), f.LostBytes)
	if reason == ReasonSwitchoverFellBack {
		// the switchover ended, unfinished: its annotation goes with it,
		// or the target's return would start it again, an outage nobody
		// asked for then (set it again to retry)
		if err := s.removeAnnotation(ctx, db, f.From); err != nil {
			log.FromContext(ctx).Error(err, "Cannot remove the switchover annotation after the fallback")
		}
	}
	out.RequeueAfter = pollSwitchover
	return nil
}

// recordPrimary records the new primary (a finished switchover or
// failover) or a demoted primary's last position, and returns db as it
// now is.
func (s *syncer) recordPrimary(ctx context.Context, db *dbv1.Database, plan Plan, out *facet.Outcome) (*dbv1.Database, error) {
	if plan.Action.Kind != ActRecordLSN {
		s.settled.Store(db.UID, s.now())
	}
	if err := s.writer.ApplyCondition(ctx, db, plan.Condition, out.Status); err != nil {
		return db, err
	}
	db = db.DeepCopy()
	if db.Status.Replication == nil {
		db.Status.Replication = &dbv1.ReplicationStatus{}
	}
	db.Status.Replication.CurrentPrimary = plan.CurrentPrimary
	db.Status.Replication.SwitchoverLSN = plan.SwitchoverLSN
	return db, nil
}
