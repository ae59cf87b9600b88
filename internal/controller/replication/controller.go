// Package replication is the controller of a Database's replication
// topology: it learns from the instances' agents which instance is the
// primary and what each reports, bootstraps the first primary and clones
// the standbys, keeps the replication role and one slot per standby on the
// primary, labels the pods with their role (the read-write Service selects
// the primary, the read-only one the replicas), and carries out
// switchovers and OnDelete rollouts, fails over to the most advanced
// healthy standby when the primary has been lost for
// spec.highAvailability.failoverDelay (the agents' primary Lease makes
// sure only one instance ever runs as the primary), and keeps
// synchronous_standby_names on the primary. It owns the ReplicationReady
// condition and status.replication. Every decision is Decide's, a pure
// function of status and the agents' answers, one step per reconcile.
package replication

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agent"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/internal/roles"
)

// Name is the controller's name in --controllers.
const Name = "replication"

// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Event reasons of the controller.
const (
	ReasonBootstrapped        = "Bootstrapped"
	ReasonCloning             = "Cloning"
	ReasonSwitchoverStarted   = "SwitchoverStarted"
	ReasonSwitchoverAbandoned = "SwitchoverAbandoned"
	ReasonDemoted             = "Demoted"
	ReasonPromoted            = "Promoted"
	ReasonSwitchoverCompleted = "SwitchoverCompleted"
	ReasonPodDeleted          = "PodDeleted"
	ReasonRoleLabelled        = "RoleLabelled"
	ReasonRejoining           = "Rejoining"
	ReasonFailoverStarted     = "FailoverStarted"
	ReasonFailoverAborted     = "FailoverAborted"
	ReasonFailoverCompleted   = "FailoverCompleted"
	ReasonDiscarded           = "TransactionsDiscarded"
	// ReasonSwitchoverFellBack: a switchover's target did not promote
	// within transitionTimeout of the demotion; the former primary is
	// promoted back, or the most advanced standby left.
	ReasonSwitchoverFellBack = "SwitchoverFellBack"
	// ReasonFailoverRetargeted: a failover's target was gone for
	// transitionTimeout, or another instance took the lease; the failover
	// goes on to another.
	ReasonFailoverRetargeted = "FailoverTargetReplaced"
)

// How often the agents are polled: while something changes, and when all
// is steady.
const (
	pollChanging = 2 * time.Second
	pollSteady   = 15 * time.Second
	// pollSwitchover is the pace of a running switchover: its next step
	// (promote once the target replayed, label once it is promoted) is
	// usually possible at once, and each poll the read-write Service
	// waits is write unavailability.
	pollSwitchover = 200 * time.Millisecond
	// pollLost is the pace while the primary is lost: its failover starts
	// as soon as spec.highAvailability.failoverDelay has passed (a
	// running failover goes at pollSwitchover).
	pollLost = time.Second
)

// pollAftermath is the pace for fastAftermath after a switchover or
// failover finished, while the topology is not whole yet: in synchronous
// mode commits wait until a standby streams from the new primary and the
// synchronous set names it.
const (
	pollAftermath = 500 * time.Millisecond
	fastAftermath = 30 * time.Second
)

// fastSwitchover is how long a switchover is polled at pollSwitchover.
const fastSwitchover = time.Minute

// statusTimeout bounds each status call to an agent, and they are made at
// once: a frozen pod delays a decision by this much, not by one such wait
// per pod. A Ready primary that answers later than this is not lost for
// it (lost lists the evidence a failover needs), and keeps its label for
// a while (slowPrimary).
const statusTimeout = 2 * time.Second

// lostStatusTimeout bounds the status call to a primary already found
// lost, while its failover waits for failoverDelay or runs: it may still
// answer (and stop the failover) when it came back, but a frozen one no
// longer costs every step of the failover statusTimeout.
const lostStatusTimeout = 250 * time.Millisecond

// detachTimeout bounds each detach call of a failover.
const detachTimeout = time.Second

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

// Controller is the replication controller.
type Controller struct{}

// New returns the replication controller.
func New() Controller { return Controller{} }

// Name implements controller.Controller.
func (Controller) Name() string { return Name }

// ConditionType implements controller.Controller.
func (Controller) ConditionType() string { return dbv1.ConditionReplicationReady }

// SetupWithManager implements controller.Controller.
func (c Controller) SetupWithManager(mgr ctrl.Manager, o facet.Options) error {
	w := facet.NewWriter(mgr, Name)
	agents := o.Agents
	if agents == nil {
		agents = instance.PodAgents{Secrets: o.SecretReader(mgr)}
	}
	s := &syncer{client: mgr.GetClient(), reader: mgr.GetAPIReader(), writer: w, agents: agents, instances: o.Instances, now: time.Now}
	r := facet.NewReconciler(mgr.GetClient(), w, c.ConditionType(), s, o)
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&dbv1.Database{}, facet.ForDatabase()).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(facet.DatabaseOf(resources.ComponentDatabase)),
			builder.WithPredicates(podChanged())).
		Watches(&appsv1.StatefulSet{}, handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &dbv1.Database{})).
		WithOptions(facet.ControllerOptions(o)).
		Complete(r)
}

// SetupDisabled implements controller.Controller.
func (c Controller) SetupDisabled(mgr ctrl.Manager, o facet.Options) error {
	return facet.SetupDisabledWith(mgr, Name, c.ConditionType(), noFailoverDisabled, o)
}

// podChanged lets through the pod events that can change the topology:
// readiness, IP, labels, deletion.
func podChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, okOld := e.ObjectOld.(*corev1.Pod)
			updated, okNew := e.ObjectNew.(*corev1.Pod)
			if !okOld || !okNew {
				return true
			}
			return old.Status.PodIP != updated.Status.PodIP || instance.PodReady(old) != instance.PodReady(updated) ||
				old.Labels[dbv1.LabelRole] != updated.Labels[dbv1.LabelRole] ||
				old.Labels[appsv1.ControllerRevisionHashLabelKey] != updated.Labels[appsv1.ControllerRevisionHashLabelKey] ||
				old.DeletionTimestamp.IsZero() != updated.DeletionTimestamp.IsZero()
		},
	}
}

// What a paused Database and a disabled controller mean for failover.
const (
	noFailoverPaused   = "no failover while paused: a lost primary is not replaced until spec.paused is false"
	noFailoverDisabled = "no failover: a lost primary is not replaced, no switchover runs, and the role labels stay as they are"
)

// PausedConsequence implements facet.PauseConsequence.
func (s *syncer) PausedConsequence() string { return noFailoverPaused }

// syncer keeps the replication topology.
type syncer struct {
	client client.Client
	// reader reads Secrets from the API server (the cache holds only
	// their metadata).
	reader    client.Reader
	writer    *facet.Writer
	agents    instance.Agents
	instances instance.Connector
	now       func() time.Time
	// ensured maps each Database to the fingerprint of the SQL state last
	// ensured on its primary (primary, password, slots).
	ensured sync.Map
	// remade maps each Database to the standbys whose slot was made
	// again because it was invalidated, while they do not stream
	// (remadeNotes; lost on restart).
	remade sync.Map
	// started maps each Database to when its running switchover started,
	// for the summary Event (lost on restart).
	started sync.Map
	// answers maps each Database's UID and pod name to its agent's last
	// answer and when it came (lost on restart): what a primary that
	// stopped answering last said (a full volume refuses a failover).
	answers sync.Map
	// silent holds the Database UID and pod name of each agent whose
	// last status call failed.
	silent sync.Map
	// leases maps each Database to the primary Lease's record as last
	// read, while its primary's agent does not answer, and since when.
	leases sync.Map
	// waits maps each Database to the step of its running switchover and
	// when this manager first saw it (lost on restart: the bound starts
	// again).
	waits sync.Map
	// settled maps each Database to when this manager saw its last
	// switchover or failover finish.
	settled sync.Map
	// synchronous maps each Database to the synchronous_standby_names
	// its primary was seen to run with (SyncApplied).
	synchronous sync.Map
}

// answer is an agent's answer and when it came.
type answer struct {
	status *agent.Status
	at     time.Time
}

// waitMark is a switchover's step and since when.
type waitMark struct {
	step  string
	since time.Time
}

// Sync implements facet.Syncer.
func (s *syncer) Sync(ctx context.Context, db *dbv1.Database) (facet.Outcome, error) {
	db, err := s.fresh(ctx, db)
	if err != nil {
		return facet.Outcome{}, err
	}
	in, pods, err := s.observe(ctx, db)
	if err != nil {
		return facet.Outcome{}, err
	}
	plan := Decide(in)
	if plan.Action.Kind == ActDetach {
		// The target is chosen from what the standbys report once they
		// no longer receive from the lost primary (found lost just now:
		// asked briefly).
		detached := s.detach(ctx, db, pods, plan.Action.Pods)
		log.FromContext(ctx).Info("Detached the standbys before choosing the failover target", "pods", plan.Action.Pods, "detached", len(detached), "why", plan.Action.Why)
		if in, pods, err = s.observe(ctx, db, plan.CurrentPrimary); err != nil {
			return facet.Outcome{}, err
		}
		in.Detached = detached
		if plan = Decide(in); plan.Action.Kind == ActDetach {
			plan.Action = Action{}
		}
	}
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
	t := dbv1.ConditionReplicationReady

	// Status first where it guards what follows: the switchover's target
	// is recorded before anything is demoted, the new primary before
	// the labels and SQL follow it.
	switch plan.Action.Kind {
	case ActStartSwitchover:
		s.started.Store(db.UID, s.now())
		if err := s.writer.ApplyCondition(ctx, db, plan.Condition, out.Status); err != nil {
			return facet.Outcome{}, err
		}
		s.writer.Eventf(db, nil, corev1.EventTypeNormal, ReasonSwitchoverStarted, "Switchover",
			"Switching over from %s to %s: %s", plan.Action.From, plan.Action.Pod, plan.Action.Why)
		out.RequeueAfter = pollSwitchover
		return out, nil
	case ActStartFailover:
		s.started.Store(db.UID, s.now())
		if err := s.writer.ApplyCondition(ctx, db, plan.Condition, out.Status); err != nil {
			return facet.Outcome{}, err
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
			// the switchover ended, unfinished: its annotation goes with
			// it, or the target's return would start it again, an
			// outage nobody asked for then (set it again to retry)
			if err := s.removeAnnotation(ctx, db, f.From); err != nil {
				log.FromContext(ctx).Error(err, "Cannot remove the switchover annotation after the fallback")
			}
		}
		out.RequeueAfter = pollSwitchover
		return out, nil
	case ActAbortFailover:
		s.started.Delete(db.UID)
		s.writer.Eventf(db, nil, corev1.EventTypeWarning, ReasonFailoverAborted, "Failover",
			"Gave up the failover from %s to %s: %s", plan.Action.From, plan.Action.Pod, plan.Action.Why)
	case ActAbortSwitchover:
		s.started.Delete(db.UID)
		s.writer.Eventf(db, nil, corev1.EventTypeWarning, ReasonSwitchoverAbandoned, "Switchover",
			"Gave up the switchover from %s to %s before demoting anything: %s", plan.Action.From, plan.Action.Pod, plan.Action.Why)
	case ActFinishSwitchover, ActRecordLSN, ActFinishFailover:
		if plan.Action.Kind != ActRecordLSN {
			s.settled.Store(db.UID, s.now())
		}
		if err := s.writer.ApplyCondition(ctx, db, plan.Condition, out.Status); err != nil {
			return facet.Outcome{}, err
		}
		db = db.DeepCopy()
		if db.Status.Replication == nil {
			db.Status.Replication = &dbv1.ReplicationStatus{}
		}
		db.Status.Replication.CurrentPrimary = plan.CurrentPrimary
		db.Status.Replication.SwitchoverLSN = plan.SwitchoverLSN
	}

	if f := plan.LastFailover; f != nil && f.DiscardedTransactions != nil &&
		(db.Status.Replication == nil || db.Status.Replication.LastFailover == nil || db.Status.Replication.LastFailover.DiscardedTransactions == nil) {
		s.writer.Eventf(db, nil, corev1.EventTypeWarning, ReasonDiscarded, "Failover",
			"%s rejoined as a standby: %d of its committed transactions were never on %s and were discarded", f.From, *f.DiscardedTransactions, f.To)
	}

	if err := s.applyLabels(ctx, db, pods, plan.Labels); err != nil {
		return facet.Outcome{}, err
	}

	if plan.EnsureSQL {
		sql, err := s.ensureSQL(ctx, db, &plan, pods)
		if err != nil {
			out.Condition = conditions.False(t, dbv1.ReasonInstanceUnhealthy,
				fmt.Sprintf("keeping the replication role and slots on the primary %s failed: %s", plan.CurrentPrimary, conditions.Quote(err.Error(), 300)))
			out.RequeueAfter = pollChanging
			return out, nil
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
		for _, note := range append(s.remadeNotes(db, &plan, in.Instances), sql.notes...) {
			out.Condition.Message += "; " + note
		}
	}

	if plan.SynchronousSet && plan.SynchronousPending != "" {
		out.Condition.Message += "; " + plan.SynchronousPending
	}
	if w := plan.WantSynchronous; plan.SynchronousSet && w != nil && w.Degraded {
		if spec := db.Spec.HighAvailability.Synchronous; spec != nil && spec.DataDurability != dbv1.DataDurabilityPreferred {
			msg := fmt.Sprintf("synchronous replication is degraded: fewer than %d of the standbys %s stream, commits wait until enough do (spec.highAvailability.synchronous.dataDurability Required)",
				w.Number, strings.Join(w.Standbys, ", "))
			if out.Condition.Status == metav1.ConditionTrue {
				out.Condition = conditions.False(t, dbv1.ReasonInstanceUnhealthy, msg)
			} else {
				out.Condition.Message += "; " + msg
			}
		} else {
			out.Condition.Message += fmt.Sprintf("; synchronous replication is degraded: commits wait for %d standby(s) (%q), fewer than spec.highAvailability.synchronous.number (Preferred)",
				w.Number, w.StandbyNames)
		}
	}

	err = s.act(ctx, db, &plan, pods)
	var ip *inProgress
	if errors.As(err, &ip) {
		// work that goes on in the agent: no failure
		out.Condition.Message += "; " + ip.msg
		err = nil
	}
	young := switchingOver(plan) && s.switchoverYoung(db)
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
	out.Status = statusOf(plan)
	return out, nil
}

// observe reads the pods and the StatefulSet and asks every pod's agent,
// all at once, each within statusTimeout; while the current primary's
// agent does not answer it also reads the primary Lease.
func (s *syncer) observe(ctx context.Context, db *dbv1.Database, lostNow ...string) (Input, map[string]*corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := s.client.List(ctx, list, client.InNamespace(db.Namespace), client.MatchingLabels(resources.PodSelectorLabels(db))); err != nil {
		return Input{}, nil, fmt.Errorf("listing the pods: %w", err)
	}
	sts, err := apply.Live(ctx, s.client, client.ObjectKey{Namespace: db.Namespace, Name: resources.StatefulSetName(db)}, &appsv1.StatefulSet{})
	if err != nil {
		return Input{}, nil, fmt.Errorf("getting StatefulSet %s: %w", resources.StatefulSetName(db), err)
	}
	in := Input{DB: db, Now: s.now()}
	if sts != nil {
		in.UpdateRevision = sts.Status.UpdateRevision
	}
	pods := map[string]*corev1.Pod{}
	count := replicas(db)
	for i := range list.Items {
		pod := &list.Items[i]
		if ord, ok := resources.InstanceOrdinal(db, pod.Name); ok {
			pods[pod.Name] = pod
			count = max(count, ord+1)
		}
	}
	in.Instances = make([]Instance, count)
	// a primary already found lost (or being failed over), and, while a
	// failover or switchover runs or has just ended, any other instance
	// that did not answer last time (a frozen target, the frozen old
	// primary), are asked within lostStatusTimeout: each step would wait
	// statusTimeout for them
	brief := map[string]bool{}
	for _, name := range lostNow {
		brief[name] = true
	}
	if r := db.Status.Replication; r != nil {
		lostPrimary := r.PrimaryLostSince != nil || failingOver(r)
		if lostPrimary {
			brief[r.CurrentPrimary] = true
		}
		if lostPrimary || s.inTransition(db) {
			for ord := range count {
				if name := resources.InstanceName(db, ord); name != r.CurrentPrimary && s.wasSilent(db, name) {
					brief[name] = true
				}
			}
		}
	}
	var wg sync.WaitGroup
	for ord := range count {
		name := resources.InstanceName(db, ord)
		inst := &in.Instances[ord]
		*inst = Instance{Name: name, Ordinal: ord}
		pod := pods[name]
		if pod == nil {
			continue
		}
		inst.Exists, inst.Terminating, inst.PodReady = true, !pod.DeletionTimestamp.IsZero(), instance.PodReady(pod)
		inst.Revision, inst.Label = pod.Labels[appsv1.ControllerRevisionHashLabelKey], pod.Labels[dbv1.LabelRole]
		switch {
		case resources.PodPredatesAgent(pod) && !inst.Terminating:
			// made before dbkeeper had replication: the only instance,
			// the primary; the rollout moves it onto the agent
			inst.Agent = legacyStatus(pod, inst.PodReady)
		case pod.Status.PodIP != "" && !inst.Terminating:
			wg.Add(1)
			timeout := statusTimeout
			if brief[name] {
				timeout = lostStatusTimeout
			}
			go func() {
				defer wg.Done()
				s.ask(ctx, db, pod, inst, timeout)
			}()
		}
	}
	wg.Wait()

	// The Lease is evidence only for a primary in place whose agent does
	// not answer (a switchover or failover that runs has its own steps).
	silent := false
	if r := db.Status.Replication; r != nil && r.CurrentPrimary != "" && r.TargetPrimary == r.CurrentPrimary {
		ord, ok := resources.InstanceOrdinal(db, r.CurrentPrimary)
		silent = ok && ord < count && in.Instances[ord].Exists && in.Instances[ord].Agent == nil
	}
	if silent {
		in.PrimaryLease = s.watchPrimaryLease(ctx, db)
	} else {
		s.forgetLease(db)
	}
	in.SwitchoverWaitSince = s.switchoverWait(db)
	if v, ok := s.settled.Load(db.UID); ok {
		in.SettledAt = v.(time.Time)
	}
	in.SyncApplied = s.syncApplied(db, in.Instances)
	return in, pods, nil
}

// ask asks pod's agent for its status, within timeout, into inst.
func (s *syncer) ask(ctx context.Context, db *dbv1.Database, pod *corev1.Pod, inst *Instance, timeout time.Duration) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := s.agents.Status(cctx, db, pod)
	key := string(db.UID) + "/" + inst.Name
	if err != nil {
		inst.Err = err.Error()
		inst.TimedOut = cctx.Err() == context.DeadlineExceeded
		s.silent.Store(key, true)
		if v, ok := s.answers.Load(key); ok {
			inst.LastAnswer, inst.LastAnswerAt = v.(answer).status, v.(answer).at
		}
		return
	}
	inst.Agent = &st
	s.silent.Delete(key)
	s.answers.Store(key, answer{status: &st, at: s.now()})
}

// wasSilent says the last status call to pod's agent failed.
func (s *syncer) wasSilent(db *dbv1.Database, pod string) bool {
	_, ok := s.silent.Load(string(db.UID) + "/" + pod)
	return ok
}

// inTransition says a switchover or failover started by this manager
// runs, or ended less than fastAftermath ago.
func (s *syncer) inTransition(db *dbv1.Database) bool {
	_, running := s.started.Load(db.UID)
	return running || s.justSettled(db)
}

// justSettled says a switchover or failover ended here less than
// fastAftermath ago.
func (s *syncer) justSettled(db *dbv1.Database) bool {
	settled, ok := s.settled.Load(db.UID)
	return ok && s.now().Sub(settled.(time.Time)) < fastAftermath
}

// fresh is db as the API server has it while a switchover or failover
// runs or has just ended here (the manager's cache may not have this
// controller's last status write yet: a failover was started twice,
// seconds apart, from a Database read 200 ms after the first start), and
// db itself otherwise.
func (s *syncer) fresh(ctx context.Context, db *dbv1.Database) (*dbv1.Database, error) {
	if !s.inTransition(db) {
		return db, nil
	}
	live := &dbv1.Database{}
	if err := s.reader.Get(ctx, client.ObjectKeyFromObject(db), live); err != nil {
		return nil, fmt.Errorf("reading Database %s: %w", db.Name, err)
	}
	if live.UID != db.UID {
		return db, nil
	}
	return live, nil
}

// switchoverWait is when this manager first saw db's running switchover
// in its current step, zero without one.
func (s *syncer) switchoverWait(db *dbv1.Database) time.Time {
	r := db.Status.Replication
	if r == nil || r.TargetPrimary == "" || r.CurrentPrimary == "" || r.TargetPrimary == r.CurrentPrimary || failingOver(r) {
		s.waits.Delete(db.UID)
		return time.Time{}
	}
	step := r.CurrentPrimary + "|" + r.TargetPrimary + "|" + r.SwitchoverLSN
	if v, ok := s.waits.Load(db.UID); ok && v.(waitMark).step == step {
		return v.(waitMark).since
	}
	m := waitMark{step: step, since: s.now()}
	s.waits.Store(db.UID, m)
	return m.since
}

// syncApplied is the synchronous_standby_names db's primary was seen to
// run with; the first poll after it was applied records the primary's
// position then.
func (s *syncer) syncApplied(db *dbv1.Database, insts []Instance) SyncApplied {
	v, ok := s.synchronous.Load(db.UID)
	if !ok {
		return SyncApplied{}
	}
	a := v.(SyncApplied)
	if a.LSN != "" {
		return a
	}
	for _, inst := range insts {
		if inst.Name == a.Primary && inst.healthyPrimary() && inst.Agent.CurrentLSN != "" {
			a.LSN = inst.Agent.CurrentLSN
			s.synchronous.Store(db.UID, a)
		}
	}
	return a
}

// applyLabels sets the role label of each pod, or removes it.
func (s *syncer) applyLabels(ctx context.Context, db *dbv1.Database, pods map[string]*corev1.Pod, want map[string]string) error {
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	// Removals first: nobody is selected twice, even for a moment.
	sort.Slice(names, func(i, j int) bool {
		if (want[names[i]] == "") != (want[names[j]] == "") {
			return want[names[i]] == ""
		}
		return names[i] < names[j]
	})
	for _, name := range names {
		pod, role := pods[name], want[name]
		if pod == nil || pod.Labels[dbv1.LabelRole] == role {
			continue
		}
		var err error
		if role == "" {
			patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, dbv1.LabelRole))
			err = s.client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(facet.FieldOwner(Name)))
		} else {
			ac := corev1ac.Pod(pod.Name, pod.Namespace).WithUID(pod.UID).WithLabels(map[string]string{dbv1.LabelRole: role})
			err = s.client.Apply(ctx, ac, client.FieldOwner(facet.FieldOwner(Name)), client.ForceOwnership)
		}
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			continue // gone or replaced: the watch brings it back
		}
		if err != nil {
			return fmt.Errorf("labelling pod %s with role %q: %w", name, role, err)
		}
		log.FromContext(ctx).Info("Labelled pod with its role", "Pod", klog.KObj(pod), "role", role)
		if role == "" {
			role = "none (in doubt)"
		}
		s.writer.Eventf(db, pod, corev1.EventTypeNormal, ReasonRoleLabelled, "Label", "Pod %s: role %s", name, role)
	}
	return nil
}

// act carries out the plan's action.
func (s *syncer) act(ctx context.Context, db *dbv1.Database, plan *Plan, pods map[string]*corev1.Pod) error {
	a := plan.Action
	pod := pods[a.Pod]
	needPod := func() error {
		if pod == nil {
			return fmt.Errorf("pod %s does not exist", a.Pod)
		}
		return nil
	}
	switch a.Kind {
	case ActBootstrapInitdb, ActBootstrapClone:
		if err := needPod(); err != nil {
			return err
		}
		req := agent.BootstrapRequest{Mode: agent.BootstrapClone}
		if a.Kind == ActBootstrapInitdb {
			var err error
			if req, err = s.firstBootstrap(ctx, db); err != nil {
				return err
			}
		}
		if _, err := s.agents.Bootstrap(ctx, db, pod, req); err != nil {
			return err
		}
		switch req.Mode {
		case agent.BootstrapInitdb:
			s.writer.Eventf(db, pod, corev1.EventTypeNormal, ReasonBootstrapped, "Bootstrap", "Creating the first primary %s (initdb)", a.Pod)
		case agent.BootstrapRestore:
			s.writer.Eventf(db, pod, corev1.EventTypeNormal, ReasonBootstrapped, "Bootstrap", "Creating the first primary %s: recovering %s%s to %s",
				a.Pod, req.Recovery.Repository.Bucket, req.Recovery.Repository.Path, req.Recovery.Target)
		default:
			s.writer.Eventf(db, pod, corev1.EventTypeNormal, ReasonCloning, "Bootstrap", "Cloning standby %s from the primary %s", a.Pod, plan.CurrentPrimary)
		}
	case ActDemote:
		if err := needPod(); err != nil {
			return err
		}
		resp, err := s.agents.Demote(ctx, db, pod)
		if err != nil {
			return err
		}
		s.writer.Eventf(db, pod, corev1.EventTypeNormal, ReasonDemoted, "Switchover",
			"Demoted the primary %s; its last position is %s", a.Pod, resp.ShutdownLSN)
		// Recorded at once: the target is promoted only once it replayed
		// up to it.
		plan.SwitchoverLSN = resp.ShutdownLSN
		return s.writer.ApplyCondition(ctx, db, plan.Condition, statusOf(*plan))
	case ActPromote:
		if err := needPod(); err != nil {
			return err
		}
		if a.Failover {
			var others []string
			for name := range pods {
				if prev := db.Status.Replication; prev == nil || name != prev.CurrentPrimary {
					others = append(others, name)
				}
			}
			s.detach(ctx, db, pods, others)
		}
		st, err := s.agents.Promote(ctx, db, pod, agent.PromoteRequest{MinReplayedLSN: a.LSN, Failover: a.Failover})
		if err != nil {
			if !a.Failover {
				if goesOn := s.promotionGoesOn(ctx, db, pod); goesOn != "" {
					log.FromContext(ctx).Info("The promotion goes on after its call ended", "pod", a.Pod, "call", err.Error(), "state", goesOn)
					return &inProgress{msg: fmt.Sprintf("%s is %s: its agent follows the promotion to its end", a.Pod, goesOn)}
				}
			}
			return err
		}
		if a.Failover {
			// asked again on every poll until it reports being the primary
			log.FromContext(ctx).V(1).Info("Asked for a failover promotion", "pod", a.Pod, "state", st.State)
			return nil
		}
		s.writer.Eventf(db, pod, corev1.EventTypeNormal, ReasonPromoted, "Switchover",
			"Promoted %s after it replayed up to %s", a.Pod, a.LSN)
	case ActRejoin:
		if err := needPod(); err != nil {
			return err
		}
		if _, err := s.agents.RejoinStandby(ctx, db, pod); err != nil {
			return err
		}
		s.writer.Eventf(db, pod, corev1.EventTypeWarning, ReasonRejoining, "Rejoin",
			"Rewinding %s from the primary: %s", a.Pod, a.Why)
	case ActFinishSwitchover:
		took := ""
		if v, ok := s.started.LoadAndDelete(db.UID); ok {
			took = fmt.Sprintf(" in %s", s.now().Sub(v.(time.Time)).Round(time.Millisecond))
		}
		s.writer.Eventf(db, nil, corev1.EventTypeNormal, ReasonSwitchoverCompleted, "Switchover",
			"Switched over from %s to %s at %s%s", a.From, a.Pod, a.LSN, took)
		s.reconnect(ctx, db, pods, a.Pod)
		return s.removeAnnotation(ctx, db, a.Pod)
	case ActFinishFailover:
		took := ""
		if v, ok := s.started.LoadAndDelete(db.UID); ok {
			took = fmt.Sprintf(" in %s", s.now().Sub(v.(time.Time)).Round(time.Millisecond))
		}
		f := plan.LastFailover
		s.writer.Eventf(db, nil, corev1.EventTypeWarning, ReasonFailoverCompleted, "Failover",
			"Failed over from %s to %s%s: %s takes writes at %s; %s was last seen at %s, %d bytes of its WAL were not received",
			a.From, a.Pod, took, a.Pod, a.LSN, a.From, orUnknown(f.FromLSN), f.LostBytes)
		s.reconnect(ctx, db, pods, a.Pod)
	case ActRemoveAnnotation:
		return s.removeAnnotation(ctx, db, a.Pod)
	case ActDeletePod:
		if err := needPod(); err != nil {
			return err
		}
		err := s.client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("deleting pod %s: %w", a.Pod, err)
		}
		s.writer.Eventf(db, pod, corev1.EventTypeNormal, ReasonPodDeleted, "RollingUpdate", "Deleted pod %s: %s", a.Pod, a.Why)
	}
	return nil
}

// inProgress is act's answer when the step's call failed but the work it
// asked for goes on (a switchover's promotion that outlasted the call):
// Sync says so and looks again, reporting no failure.
type inProgress struct{ msg string }

func (e *inProgress) Error() string { return e.msg }

// promotionGoesOn says, when a switchover's promote call to pod's agent
// failed (a 409 because the agent is busy promoting, or a call that ended
// before the promotion did, which the agent follows to its end), whether
// the agent, asked again within statusTimeout, promotes still or is
// promoted: "promoting" or "promoted", "" when neither.
func (s *syncer) promotionGoesOn(ctx context.Context, db *dbv1.Database, pod *corev1.Pod) string {
	cctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	st, err := s.agents.Status(cctx, db, pod)
	switch {
	case err != nil:
		return ""
	case st.State == agent.StatePromoting:
		return "promoting"
	case st.Role == agent.RolePrimary && st.State == agent.StateRunning:
		return "promoted"
	}
	return ""
}

// removeAnnotation removes the switchover annotation once it names the
// primary.
func (s *syncer) removeAnnotation(ctx context.Context, db *dbv1.Database, primary string) error {
	v, ok := db.Annotations[dbv1.AnnotationSwitchoverTo]
	if !ok || v != primary {
		return nil
	}
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, dbv1.AnnotationSwitchoverTo))
	if err := s.client.Patch(ctx, db, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(facet.FieldOwner(Name))); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("removing annotation %s: %w", dbv1.AnnotationSwitchoverTo, err))
	}
	return nil
}

// ensureSQL keeps the replication role (with the replication Secret's
// password, as a SCRAM verifier) and one physical slot per standby on the
// primary (ensureSlots: made again when invalidated), and drops dbkeeper's
// inactive slots of instances that no longer exist. Its outcome says what
// it waits for ("" when all is in place) and what the slots' states add to
// ReplicationReady's message. Once all is in place for a fingerprint
// (primary, password, slots, synchronous standbys) the next passes only
// list the slots, a query on the primary: a slot is invalidated
// (wal_status lost) without anything in the fingerprint changing.
func (s *syncer) ensureSQL(ctx context.Context, db *dbv1.Database, plan *Plan, pods map[string]*corev1.Pod) (sqlOutcome, error) {
	name := resources.ReplicationSecretName(db)
	sec, err := apply.Live(ctx, s.reader, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.Secret{})
	if err != nil {
		return sqlOutcome{}, fmt.Errorf("getting Secret %s: %w", name, err)
	}
	password := ""
	if sec != nil {
		password = string(sec.Data[resources.ReplicationPasswordKey])
	}
	if password == "" {
		if len(plan.Slots) == 0 {
			return sqlOutcome{}, nil // one instance: nothing streams
		}
		return sqlOutcome{wait: fmt.Sprintf("waiting for Secret %s with key %s to create the standbys", name, resources.ReplicationPasswordKey)}, nil
	}
	if s.instances == nil {
		return sqlOutcome{}, fmt.Errorf("no connector to the Databases' servers")
	}
	sum := sha256.Sum256([]byte(password))
	fingerprint := plan.CurrentPrimary + "|" + hex.EncodeToString(sum[:]) + "|" + strings.Join(plan.Slots, ",") + "|" + standbyNames(plan.WantSynchronous)
	var conn instance.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(ctx)
		}
	}()
	if v, ok := s.ensured.Load(db.UID); ok && v.(string) == fingerprint {
		plan.Synchronous, plan.SynchronousSet = plan.SynchronousRecord, true
		if len(plan.Slots) == 0 {
			return sqlOutcome{}, nil // no standby: no slot to lose
		}
		// A check of what was in place: a failure leaves the condition
		// as it is and is tried again on the next pass.
		c, err := instance.ConnectAsSuperuser(ctx, s.instances, s.reader, db, "")
		if err != nil {
			log.FromContext(ctx).Info("Cannot check the replication slots on the primary", "primary", plan.CurrentPrimary, "error", err.Error())
			return sqlOutcome{}, nil
		}
		conn = c
		have, err := listSlots(ctx, conn)
		if err != nil {
			log.FromContext(ctx).Info("Cannot check the replication slots on the primary", "primary", plan.CurrentPrimary, "error", err.Error())
			return sqlOutcome{}, nil
		}
		if !slotsToMend(plan.Slots, have) {
			return sqlOutcome{notes: unreservedNotes(plan, pods, have)}, nil
		}
		s.ensured.Delete(db.UID) // all is ensured again, on this session
	}
	if conn == nil {
		c, err := instance.ConnectAsSuperuser(ctx, s.instances, s.reader, db, "")
		if err != nil {
			return sqlOutcome{}, err
		}
		conn = c
	}
	// The controller's own statements never wait for a synchronous
	// standby: after a failover the new primary may still name standbys
	// that cannot confirm (its postgresql.auto.conf came from a clone or a
	// rewind), and the statement that fixes that must not queue behind
	// it, nor the slots the standbys need to stream.
	if _, err := conn.Exec(ctx, "SET synchronous_commit TO local"); err != nil {
		return sqlOutcome{}, fmt.Errorf("setting synchronous_commit for the controller's session: %w", err)
	}
	if err := ensureSynchronous(ctx, conn, standbyNames(plan.WantSynchronous)); err != nil {
		return sqlOutcome{}, err
	}
	if v, ok := s.synchronous.Load(db.UID); !ok || v.(SyncApplied).Primary != plan.CurrentPrimary || v.(SyncApplied).Names != standbyNames(plan.WantSynchronous) {
		s.synchronous.Store(db.UID, SyncApplied{Primary: plan.CurrentPrimary, Names: standbyNames(plan.WantSynchronous)})
	}

	user := agent.ReplicationUser
	stored, exists, err := conn.QueryValue(ctx, fmt.Sprintf("SELECT rolpassword FROM pg_catalog.pg_authid WHERE rolname = %s", quoteLiteral(user)))
	if err != nil {
		return sqlOutcome{}, fmt.Errorf("reading role %s: %w", user, err)
	}
	if !exists || stored == nil || !engine.ScramVerifierMatches(*stored, password) {
		verifier, err := engine.ScramVerifier(password)
		if err != nil {
			return sqlOutcome{}, err
		}
		stmt := fmt.Sprintf("ALTER ROLE %s PASSWORD %s", quoteIdent(user), quoteLiteral(verifier))
		if !exists {
			stmt = fmt.Sprintf("CREATE ROLE %s WITH LOGIN REPLICATION PASSWORD %s", quoteIdent(user), quoteLiteral(verifier))
		}
		if err := roles.ExecUnlogged(ctx, conn, engine.Postgres{}, stmt); err != nil {
			return sqlOutcome{}, fmt.Errorf("keeping role %s: %w", user, err)
		}
		log.FromContext(ctx).Info("Set the replication role's password", "role", user, "created", !exists)
	}

	have, err := listSlots(ctx, conn)
	if err != nil {
		return sqlOutcome{}, err
	}
	pending, err := s.ensureSlots(ctx, conn, db, plan, pods, have)
	if err != nil {
		return sqlOutcome{}, err
	}
	if err := ensureRewindGrants(ctx, conn); err != nil {
		return sqlOutcome{}, err
	}
	plan.Synchronous, plan.SynchronousSet = plan.SynchronousRecord, true
	if pending == "" {
		s.ensured.Store(db.UID, fingerprint)
	}
	return sqlOutcome{notes: unreservedNotes(plan, pods, have)}, nil
}

// sqlOutcome is what ensureSQL did not finish.
type sqlOutcome struct {
	// wait says what it waits for before the standbys can be cloned, ""
	// when nothing.
	wait string
	// notes are what ReplicationReady's message says of the slots.
	notes []string
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// statusOf is status.replication of the plan.
func statusOf(p Plan) *dbv1ac.DatabaseStatusApplyConfiguration {
	return dbv1ac.DatabaseStatus().WithReplication(resources.ViaJSON[dbv1ac.ReplicationStatusApplyConfiguration](dbv1.ReplicationStatus{
		CurrentPrimary: p.CurrentPrimary, TargetPrimary: p.TargetPrimary, SwitchoverLSN: p.SwitchoverLSN,
		SystemID: p.SystemID, Instances: p.Rows,
		PrimaryLostSince: p.PrimaryLostSince, LastFailover: p.LastFailover, Synchronous: p.Synchronous,
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
		PrimaryLostSince: r.PrimaryLostSince, LastFailover: r.LastFailover, Synchronous: r.Synchronous})
}

// legacyStatus stands for the agent of a pod made before dbkeeper had
// replication (resources.PodPredatesAgent): such a Database ran one instance,
// its primary, which serves while its pod is Ready. The rollout to the
// current template restarts it once, onto the agent, with its data.
func legacyStatus(pod *corev1.Pod, ready bool) *agent.Status {
	st := &agent.Status{Pod: pod.Name, State: agent.StateRunning, Role: agent.RolePrimary, Ready: ready,
		Message: "runs without the instance agent (made before dbkeeper had replication); the rollout restarts it onto the agent"}
	if !ready {
		st.State = agent.StateStarting
	}
	return st
}

// reconnect restarts the WAL receiver of every instance but the new
// primary, once it is labelled (a detach: the receiver starts again after
// wal_retrieve_retry_interval): a receiver that was waiting to connect to
// the read-write Service while no pod had the primary label would wait
// for its connect timeout first. The old primary and instances that are
// not standbys refuse, and are left alone; one that did not answer its
// last status call is not asked.
func (s *syncer) reconnect(ctx context.Context, db *dbv1.Database, pods map[string]*corev1.Pod, primary string) {
	var names []string
	for name := range pods {
		if name != primary && !s.wasSilent(db, name) {
			names = append(names, name)
		}
	}
	s.detach(ctx, db, pods, names)
}

// detach stops the WAL receivers of the standbys named (all at once,
// each within detachTimeout) and returns those whose agent did it: a
// failover detaches them before it ranks them, and again before it
// promotes one, so that a lost primary that was only frozen cannot, on
// waking, send them WAL the new primary never has, nor have a synchronous
// commit confirmed by them. An unreachable standby is not waited for.
func (s *syncer) detach(ctx context.Context, db *dbv1.Database, pods map[string]*corev1.Pod, names []string) map[string]bool {
	detached := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range names {
		pod := pods[name]
		if pod == nil || pod.DeletionTimestamp != nil || pod.Status.PodIP == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			dctx, cancel := context.WithTimeout(ctx, detachTimeout)
			defer cancel()
			if _, err := s.agents.Detach(dctx, db, pod); err != nil {
				log.FromContext(ctx).V(1).Info("Cannot detach a standby before the failover", "pod", name, "err", err.Error())
				return
			}
			mu.Lock()
			detached[name] = true
			mu.Unlock()
		}()
	}
	wg.Wait()
	return detached
}
