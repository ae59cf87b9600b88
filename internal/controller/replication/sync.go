package replication

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// Sync implements facet.Syncer. Its steps: read the world and decide
// (decide), write first what guards the rest (recordFirst), label the
// pods, keep the replication role, slots and synchronous set on the
// primary (keepSQL, noteSynchronous), carry out the plan's action
// (carryOut).
func (s *syncer) Sync(ctx context.Context, db *dbv1.Database) (facet.Outcome, error) {
	db, err := s.fresh(ctx, db)
	if err != nil {
		return facet.Outcome{}, err
	}
	in, pods, plan, err := s.decide(ctx, db)
	if err != nil {
		return facet.Outcome{}, err
	}
	out := firstOutcome(plan)
	db, done, err := s.recordFirst(ctx, db, plan, &out)
	if err != nil {
		return facet.Outcome{}, err
	}
	if done {
		return out, nil
	}
	s.reportDiscarded(db, plan)
	if err := s.applyLabels(ctx, db, pods, plan.Labels); err != nil {
		return facet.Outcome{}, err
	}
	if plan.EnsureSQL && !s.keepSQL(ctx, db, &plan, pods, in.Instances, &out) {
		return out, nil
	}
	noteSynchronous(db, plan, &out)
	s.carryOut(ctx, db, &plan, pods, &out)
	out.Status = statusOf(plan)
	return out, nil
}

// decide observes and decides. A plan that detaches the standbys from a
// lost primary (ActDetach) is carried out at once, and the target is
// chosen from what the standbys report once they no longer receive from
// the lost primary (found lost just now: asked briefly).
func (s *syncer) decide(ctx context.Context, db *dbv1.Database) (Input, map[string]*corev1.Pod, Plan, error) {
	in, pods, err := s.observe(ctx, db)
	if err != nil {
		return Input{}, nil, Plan{}, err
	}
	plan := Decide(in)
	if plan.Action.Kind != ActDetach {
		return in, pods, plan, nil
	}
	detached := s.detach(ctx, db, pods, plan.Action.Pods)
	log.FromContext(ctx).Info("Detached the standbys before choosing the failover target", "pods", plan.Action.Pods, "detached", len(detached), "why", plan.Action.Why)
	if in, pods, err = s.observe(ctx, db, plan.CurrentPrimary); err != nil {
		return Input{}, nil, Plan{}, err
	}
	in.Detached = detached
	if plan = Decide(in); plan.Action.Kind == ActDetach {
		plan.Action = Action{}
	}
	return in, pods, plan, nil
}

// firstOutcome is the plan's condition and status, polled again at the
// plan's pace.
func firstOutcome(plan Plan) facet.Outcome {
	out := facet.Outcome{Condition: plan.Condition, Status: statusOf(plan), RequeueAfter: pollSteady}
	if plan.Changing {
		out.RequeueAfter = pollChanging
	}
	if plan.PrimaryLostSince != nil && plan.Condition.Reason == dbv1.ReasonPrimaryLost {
		// a failover starts once the delay has passed
		out.RequeueAfter = pollLost
		if plan.Requeue > 0 && plan.Requeue < pollLost {
			out.RequeueAfter = plan.Requeue
		}
	}
	return out
}

// reportDiscarded emits the Event of the transactions a rewind discarded,
// once, when the plan first records them.
func (s *syncer) reportDiscarded(db *dbv1.Database, plan Plan) {
	if f := plan.LastFailover; f != nil && f.DiscardedTransactions != nil &&
		(db.Status.Replication == nil || db.Status.Replication.LastFailover == nil || db.Status.Replication.LastFailover.DiscardedTransactions == nil) {
		s.writer.Eventf(db, nil, corev1.EventTypeWarning, ReasonDiscarded, "Failover",
			"%s rejoined as a standby: %d of its committed transactions were never on %s and were discarded", f.From, *f.DiscardedTransactions, f.To)
	}
}

// keepSQL keeps the replication role, the slots and the synchronous set
// on the primary (ensureSQL) and adds to the condition what it waits for;
// false when it failed: out says so, and the step ends there.
func (s *syncer) keepSQL(ctx context.Context, db *dbv1.Database, plan *Plan, pods map[string]*corev1.Pod, insts []Instance, out *facet.Outcome) bool {
	t := dbv1.ConditionReplicationReady
	sql, err := s.ensureSQL(ctx, db, plan, pods)
	if err != nil {
		out.Condition = conditions.False(t, dbv1.ReasonInstanceUnhealthy,
			fmt.Sprintf("keeping the replication role and slots on the primary %s failed: %s", plan.CurrentPrimary, conditions.Quote(err.Error(), 300)))
		out.RequeueAfter = pollChanging
		return false
	}
	if msg := sql.wait; msg != "" {
		if plan.Action.Kind == ActBootstrapClone {
			plan.Action = Action{}
		}
		if out.Condition.Status == "True" {
			out.Condition = conditions.False(t, dbv1.ReasonInstanceUnhealthy, msg)
		} else {
			out.Condition.Message += "; " + msg
		}
		out.RequeueAfter = pollChanging
	}
	for _, note := range append(s.remadeNotes(db, plan, insts), sql.notes...) {
		out.Condition.Message += "; " + note
	}
	return true
}

// noteSynchronous adds to the condition what keeps the synchronous
// record behind, and a degraded synchronous replication: with Required
// durability ReplicationReady is False then.
func noteSynchronous(db *dbv1.Database, plan Plan, out *facet.Outcome) {
	if plan.SynchronousSet && plan.SynchronousPending != "" {
		out.Condition.Message += "; " + plan.SynchronousPending
	}
	w := plan.WantSynchronous
	if !plan.SynchronousSet || w == nil || !w.Degraded {
		return
	}
	if spec := db.Spec.HighAvailability.Synchronous; spec != nil && spec.DataDurability != dbv1.DataDurabilityPreferred {
		msg := fmt.Sprintf("synchronous replication is degraded: fewer than %d of the standbys %s stream, commits wait until enough do (spec.highAvailability.synchronous.dataDurability Required)",
			w.Number, strings.Join(w.Standbys, ", "))
		if out.Condition.Status == metav1.ConditionTrue {
			out.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonInstanceUnhealthy, msg)
		} else {
			out.Condition.Message += "; " + msg
		}
		return
	}
	out.Condition.Message += fmt.Sprintf("; synchronous replication is degraded: commits wait for %d standby(s) (%q), fewer than spec.highAvailability.synchronous.number (Preferred)",
		w.Number, w.StandbyNames)
}

// carryOut carries out the plan's action (act) and sets when to look
// again: soon after a failed step, at once while a young switchover runs
// or just after one ended.
func (s *syncer) carryOut(ctx context.Context, db *dbv1.Database, plan *Plan, pods map[string]*corev1.Pod, out *facet.Outcome) {
	err := s.act(ctx, db, plan, pods)
	var ip *inProgress
	if errors.As(err, &ip) {
		// work that goes on in the agent: no failure
		out.Condition.Message += "; " + ip.msg
		err = nil
	}
	// a finished switchover counts as young for this last requeue; its
	// start time is gone (took) and must not be stored again, or the
	// Database would count as in transition for good
	young := switchingOver(*plan) && (plan.Action.Kind == ActFinishSwitchover || s.switchoverYoung(db))
	if err != nil {
		log.FromContext(ctx).Info("Replication step failed, retrying", "action", plan.Action.Kind, "pod", plan.Action.Pod, "error", err.Error())
		out.Condition.Message += fmt.Sprintf("; %s of %s failed: %s", plan.Action.Kind, plan.Action.Pod, conditions.Quote(err.Error(), 300))
		out.RequeueAfter = pollChanging
		if young {
			// a step of a young switchover or failover refused (its
			// target promoted meanwhile: "not a running standby"):
			// looked at again soon, not in a hot loop
			out.RequeueAfter = pollAftermath
		}
	}
	if err == nil && plan.Changing && s.justSettled(db) {
		// just after a switchover or failover: the standbys' labels and
		// the synchronous set follow the new primary at once
		out.RequeueAfter = min(out.RequeueAfter, pollAftermath)
	}
	if err == nil && young {
		// a failed step, or a switchover stuck for longer than
		// fastSwitchover, waits pollChanging: no hot loop on an agent
		// that does not answer or a target that does not catch up
		out.RequeueAfter = pollSwitchover
	}
}

// switchoverYoung says the Database's switchover started less than
// fastSwitchover ago (as this manager saw it: a restarted one starts the
// clock again).
func (s *syncer) switchoverYoung(db *dbv1.Database) bool {
	v, _ := s.started.LoadOrStore(db.UID, s.now())
	return s.now().Sub(v.(time.Time)) < fastSwitchover
}

// switchingOver says a switchover runs or has just ended with this plan.
func switchingOver(p Plan) bool {
	return p.TargetPrimary != p.CurrentPrimary || p.Action.Kind == ActFinishSwitchover
}

// statusOf is status.replication of the plan.
func statusOf(p Plan) *dbv1ac.DatabaseStatusApplyConfiguration {
	return dbv1ac.DatabaseStatus().WithReplication(resources.ViaJSON[dbv1ac.ReplicationStatusApplyConfiguration](dbv1.ReplicationStatus{
		CurrentPrimary: p.CurrentPrimary, TargetPrimary: p.TargetPrimary, SwitchoverLSN: p.SwitchoverLSN,
		SystemID: p.SystemID, Instances: p.Rows,
		PrimaryLostSince: p.PrimaryLostSince, LastFailover: p.LastFailover, Synchronous: p.Synchronous,
		MajorUpgrade: p.MajorUpgrade,
	}))
}

// CurrentStatus implements facet.Syncer.
func (s *syncer) CurrentStatus(db *dbv1.Database) *dbv1ac.DatabaseStatusApplyConfiguration {
	r := db.Status.Replication
	if r == nil {
		return nil
	}
	return statusOf(Plan{CurrentPrimary: r.CurrentPrimary, TargetPrimary: r.TargetPrimary, SwitchoverLSN: r.SwitchoverLSN,
		SystemID: r.SystemID, Rows: r.Instances,
		PrimaryLostSince: r.PrimaryLostSince, LastFailover: r.LastFailover, Synchronous: r.Synchronous,
		MajorUpgrade: r.MajorUpgrade})
}
