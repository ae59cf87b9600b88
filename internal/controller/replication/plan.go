package replication

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agent"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// StateUnreachable is the state of an instance whose agent did not answer.
const StateUnreachable = "Unreachable"

// maxSwitchoverLag is the largest replay lag of a switchover target: the
// old primary takes no writes until the target replayed all of it.
const maxSwitchoverLag = 64 << 20

// Instance is one instance (pod) of a Database as the controller sees it.
type Instance struct {
	Name    string
	Ordinal int
	// Exists says the pod exists; Terminating that it is being deleted.
	Exists, Terminating bool
	// PodReady is the pod's Ready condition.
	PodReady bool
	// Revision is the pod's controller-revision-hash.
	Revision string
	// Label is the pod's role label, empty when it has none.
	Label string
	// Agent is what the pod's agent answered, nil when it was not asked
	// (no pod, no IP, terminating) or did not answer (Err says why).
	Agent *agent.Status
	Err   string
	// LastAnswer is the agent's last answer this manager saw, when it
	// did not answer now (the full volume of a primary that went away),
	// and LastAnswerAt when it came.
	LastAnswer   *agent.Status
	LastAnswerAt time.Time
	// TimedOut says the agent was asked and did not answer within
	// statusTimeout (a loaded or frozen pod, not a refused connection).
	TimedOut bool
}

// Input is everything a decision is made from.
type Input struct {
	DB *dbv1.Database
	// Instances are in ordinal order.
	Instances []Instance
	// UpdateRevision is the StatefulSet's status.updateRevision.
	UpdateRevision string
	// Now is the time of the decision (primaryLostSince, failoverDelay).
	Now time.Time
	// Detached are the standbys detached from the lost primary in this
	// reconcile, before their positions were read again; nil when none
	// was detached yet (a failover then detaches first: ActDetach).
	Detached map[string]bool
	// PrimaryLease is the primary Lease as this manager watched it while
	// the current primary's agent does not answer; nil otherwise, or when
	// it could not be read.
	PrimaryLease *LeaseView
	// SwitchoverWaitSince is when this manager first saw the running
	// switchover in its current step (currentPrimary, targetPrimary,
	// switchoverLSN); zero without a switchover.
	SwitchoverWaitSince time.Time
	// SettledAt is when this manager last saw a switchover or failover
	// finish (a failover's finishedAt counts too).
	SettledAt time.Time
	// SyncApplied is the synchronous_standby_names this manager saw the
	// primary run with, and the primary's position after it did.
	SyncApplied SyncApplied
}

// ActionKind is what the controller does next.
type ActionKind string

// The actions.
const (
	ActNone             ActionKind = ""
	ActBootstrapInitdb  ActionKind = "BootstrapInitdb"
	ActBootstrapClone   ActionKind = "BootstrapClone"
	ActStartSwitchover  ActionKind = "StartSwitchover"
	ActAbortSwitchover  ActionKind = "AbortSwitchover"
	ActDemote           ActionKind = "Demote"
	ActRecordLSN        ActionKind = "RecordSwitchoverLSN"
	ActPromote          ActionKind = "Promote"
	ActFinishSwitchover ActionKind = "FinishSwitchover"
	ActRemoveAnnotation ActionKind = "RemoveAnnotation"
	ActDeletePod        ActionKind = "DeletePod"
	ActStartFailover    ActionKind = "StartFailover"
	ActAbortFailover    ActionKind = "AbortFailover"
	ActFinishFailover   ActionKind = "FinishFailover"
	ActRejoin           ActionKind = "RejoinStandby"
	// ActDetach detaches Action.Pods from the lost primary; the
	// controller then reads their positions again and decides anew
	// (Input.Detached), within the same reconcile.
	ActDetach ActionKind = "DetachStandbys"
)

// Action is one step.
type Action struct {
	Kind ActionKind
	// Pod is the instance acted on (the target of a switchover).
	Pod string
	// From is the old primary of a switchover.
	From string
	// LSN is the switchover LSN (Promote's MinReplayedLSN, RecordLSN's
	// value).
	LSN string
	// Why says why, for Events.
	Why string
	// Failover: Promote's PromoteRequest.Failover (the primary is lost).
	Failover bool
	// Pods are the instances ActDetach detaches.
	Pods []string
	// EventReason, when set, is the reason of StartFailover's Event (a
	// switchover that fell back, a failover target replaced).
	EventReason string
}

// Plan is the decision of one reconcile.
type Plan struct {
	// CurrentPrimary, TargetPrimary and SwitchoverLSN are
	// status.replication's after the action.
	CurrentPrimary, TargetPrimary, SwitchoverLSN, SystemID string
	Rows                                                   []dbv1.InstanceStatus
	// Labels is each existing pod's desired role label; "" removes it.
	Labels map[string]string
	// Slots are the slots the primary must keep (one per standby), when
	// the primary is healthy enough to run SQL in (EnsureSQL).
	Slots     []string
	EnsureSQL bool
	Action    Action
	Condition metav1.Condition
	// Changing says something is in progress: look again soon.
	Changing bool
	// Requeue, when not zero, is when to look again at the latest (a
	// failover delay that ends).
	Requeue time.Duration
	// PrimaryLostSince, LastFailover and Synchronous are
	// status.replication's after the action; PrimaryLostSince is set only
	// while the primary is lost (and its failover runs).
	PrimaryLostSince *metav1.Time
	LastFailover     *dbv1.FailoverStatus
	Synchronous      *dbv1.SynchronousStatus
	// WantSynchronous is the synchronous replication EnsureSQL sets on
	// the primary (nil: none); Synchronous becomes SynchronousRecord once
	// it is set, and SynchronousSet says it was.
	WantSynchronous   *dbv1.SynchronousStatus
	SynchronousRecord *dbv1.SynchronousStatus
	SynchronousSet    bool
	// SynchronousPending says why SynchronousRecord is not yet
	// WantSynchronous, "" when it is.
	SynchronousPending string
}

func replicas(db *dbv1.Database) int { return int(db.Spec.ReplicaCount()) }

// parseLSN reads a PostgreSQL position ("16/B374D848"); false when it is
// not one (an instance that reports none).
func parseLSN(s string) (uint64, bool) {
	v, err := agent.ParseLSN(s)
	return v, err == nil
}

func (i *Instance) reportsPrimary() bool {
	return i.Agent != nil && i.Agent.Role == agent.RolePrimary
}

// claimsPrimary: the instance reports being a primary that may run as
// one: not fenced, and not while its agent sees another holder of the
// primary lease (a former primary that has yet to rejoin as a standby).
func (i *Instance) claimsPrimary() bool {
	if !i.reportsPrimary() || i.Agent.State == agent.StateFenced {
		return false
	}
	l := i.Agent.Lease
	return l == nil || l.Holder == "" || l.Holder == i.Name
}

// healthyPrimary: the instance runs as a primary and takes connections.
func (i *Instance) healthyPrimary() bool {
	return i.reportsPrimary() && i.Agent.State == agent.StateRunning && i.Agent.Ready && !i.Terminating
}

// streaming: a standby that runs, takes read-only connections and
// streams.
func (i *Instance) streaming() bool {
	return i.Agent != nil && i.Agent.Role == agent.RoleReplica && i.Agent.State == agent.StateRunning && i.Agent.Ready &&
		i.Agent.WALReceiver == "streaming" && !i.Terminating && i.PodReady
}

// problem says what is wrong with a standby, "" when nothing is.
func (i *Instance) problem() string {
	switch {
	case !i.Exists:
		return "its pod does not exist"
	case i.Terminating:
		return "its pod is being deleted"
	case i.Agent == nil && i.Err != "":
		return "its agent does not answer: " + conditions.Quote(i.Err, 120)
	case i.Agent == nil:
		return "its pod has no IP yet"
	case i.Agent.State != agent.StateRunning:
		msg := "it is " + string(i.Agent.State)
		if i.Agent.Message != "" {
			msg += ": " + conditions.Quote(i.Agent.Message, 120)
		}
		return msg
	case !i.Agent.Ready || !i.PodReady:
		return "it is not ready"
	case i.Agent.Role == agent.RoleReplica && i.Agent.WALReceiver != "streaming":
		return fmt.Sprintf("it does not stream from the primary (WAL receiver %q)", i.Agent.WALReceiver)
	}
	return ""
}

// Decide is the next step for the Database from what its pods and their
// agents report: pure, so that any state a manager stopped in leads to
// the same next step.
func Decide(in Input) Plan {
	db := in.DB
	st := dbv1.ReplicationStatus{}
	if db.Status.Replication != nil {
		st = *db.Status.Replication
	}
	p := Plan{CurrentPrimary: st.CurrentPrimary, TargetPrimary: st.TargetPrimary, SwitchoverLSN: st.SwitchoverLSN, SystemID: st.SystemID,
		LastFailover: st.LastFailover.DeepCopy(), Synchronous: st.Synchronous.DeepCopy()}
	byName := map[string]*Instance{}
	var primaries []string
	for i := range in.Instances {
		inst := &in.Instances[i]
		byName[inst.Name] = inst
		if inst.claimsPrimary() {
			primaries = append(primaries, inst.Name)
		}
	}
	n := replicas(db)
	t := dbv1.ConditionReplicationReady

	switch {
	case failingOver(&st):
		decideFailover(&p, in, byName, primaries)
	case p.TargetPrimary != "" && p.CurrentPrimary != "" && p.TargetPrimary != p.CurrentPrimary:
		decideSwitchover(&p, in, byName)
	case n == 0:
		p.Condition = conditions.True(t, dbv1.ReasonScaledToZero, "spec.replicas is 0: no instance runs")
	case len(primaries) > 1:
		p.Condition = conditions.False(t, dbv1.ReasonInstanceUnhealthy, fmt.Sprintf(
			"%s all report being the primary: none is selected by the read-write Service until one is demoted", strings.Join(primaries, ", ")))
		p.Changing = true
	case p.CurrentPrimary == "":
		decideBootstrap(&p, in, byName, primaries)
	default:
		decideSteady(&p, in, byName, primaries)
	}
	if p.SystemID == "" {
		for _, inst := range in.Instances {
			if inst.Agent != nil && inst.Agent.SystemID != "" {
				p.SystemID = inst.Agent.SystemID
				break
			}
		}
	}
	copyDiscarded(&p, byName)
	p.Rows = rows(in, p.CurrentPrimary)
	p.Labels = labels(in, p, len(primaries))
	return p
}

// decideBootstrap: no primary is recorded yet.
func decideBootstrap(p *Plan, in Input, byName map[string]*Instance, primaries []string) {
	t := dbv1.ConditionReplicationReady
	p.Changing = true
	if len(primaries) == 1 {
		// A primary exists (a manager that lost its status, or one that
		// bootstrapped before it could record it): record it.
		p.CurrentPrimary, p.TargetPrimary = primaries[0], primaries[0]
		p.Condition = conditions.False(t, dbv1.ReasonBootstrapping, fmt.Sprintf("%s is the primary", primaries[0]))
		return
	}
	for _, inst := range in.Instances {
		if inst.Agent != nil && !inst.Agent.DataEmpty {
			p.Condition = conditions.False(t, dbv1.ReasonInstanceUnhealthy, fmt.Sprintf(
				"no instance reports being the primary, and %s has data (%s, role %q): dbkeeper does not pick a primary by guess",
				inst.Name, inst.Agent.State, inst.Agent.Role))
			return
		}
	}
	first := byName[resources.InstanceName(in.DB, 0)]
	for _, inst := range in.Instances {
		if inst.Exists && inst.Agent == nil && inst.Err != "" {
			p.Condition = conditions.False(t, dbv1.ReasonBootstrapping, fmt.Sprintf(
				"waiting for the agent of %s, which does not answer, to tell whether it has data: %s", inst.Name, conditions.Quote(inst.Err, 120)))
			return
		}
	}
	switch {
	case first == nil || !first.Exists || first.Agent == nil:
		p.Condition = conditions.False(t, dbv1.ReasonBootstrapping, fmt.Sprintf("waiting for pod %s and its agent", resources.InstanceName(in.DB, 0)))
	case first.Agent.State == agent.StateWaiting && first.Agent.DataEmpty:
		p.TargetPrimary = first.Name
		p.Action = Action{Kind: ActBootstrapInitdb, Pod: first.Name, Why: "no instance has data"}
		p.Condition = conditions.False(t, dbv1.ReasonBootstrapping, fmt.Sprintf("creating the first primary %s (initdb)", first.Name))
	default:
		p.Condition = conditions.False(t, dbv1.ReasonBootstrapping, fmt.Sprintf("%s is %s", first.Name, first.Agent.State))
	}
}

// decideSteady: a primary is recorded and no switchover runs.
func decideSteady(p *Plan, in Input, byName map[string]*Instance, primaries []string) {
	db := in.DB
	t := dbv1.ConditionReplicationReady
	n := replicas(db)
	p.TargetPrimary = p.CurrentPrimary
	prim := byName[p.CurrentPrimary]
	if prim == nil || !prim.healthyPrimary() || !prim.claimsPrimary() {
		decideLost(p, in, byName, prim, primaries)
		return
	}
	// The slots of the standbys that should exist.
	for _, inst := range in.Instances {
		if inst.Ordinal < n && inst.Name != p.CurrentPrimary {
			p.Slots = append(p.Slots, agent.SlotName(inst.Name))
		}
	}
	p.EnsureSQL = true
	p.WantSynchronous = synchronousFor(db, in.Instances, p.CurrentPrimary)
	p.SynchronousRecord, p.SynchronousPending = synchronousRecord(p.Synchronous, p.WantSynchronous, in.SyncApplied, in.Instances, prim)

	// Standbys to create.
	var unhealthy []string
	for _, inst := range in.Instances {
		if inst.Agent != nil && inst.Agent.VolumeFull && inst.Ordinal < n {
			role := "standby"
			if inst.Name == p.CurrentPrimary {
				role = "primary"
			}
			unhealthy = append(unhealthy, fmt.Sprintf(
				"the data volume of the %s %s is full (%d bytes free): writes fail until spec.storage.size grows or space is freed; no failover (a standby's volume is no larger)",
				role, inst.Name, inst.Agent.VolumeAvailableBytes))
		}
	}
	for _, inst := range in.Instances {
		if inst.Ordinal >= n || inst.Name == p.CurrentPrimary {
			continue
		}
		if inst.Agent != nil && inst.Agent.State == agent.StateWaiting && inst.Agent.DataEmpty && !inst.Terminating {
			if p.Action.Kind == ActNone {
				p.Action = Action{Kind: ActBootstrapClone, Pod: inst.Name, Why: "its data directory is empty"}
			}
			unhealthy = append(unhealthy, fmt.Sprintf("%s is being created", inst.Name))
			continue
		}
		if why := inst.problem(); why != "" {
			unhealthy = append(unhealthy, fmt.Sprintf("%s: %s", inst.Name, why))
		}
	}
	if p.Action.Kind != ActNone {
		p.Changing = true
		p.Condition = conditions.False(t, dbv1.ReasonBootstrapping, fmt.Sprintf("cloning standby %s from the primary %s", p.Action.Pod, p.CurrentPrimary))
		return
	}
	if d := divergedStandby(in, prim); d != nil {
		p.Changing = true
		p.Action = Action{Kind: ActRejoin, Pod: d.Name, Why: fmt.Sprintf(
			"it is on timeline %d, the primary %s on %d, and has not streamed for %s since the failover", d.Agent.Timeline, prim.Name, prim.Agent.Timeline, rejoinAfter)}
		p.Condition = conditions.False(t, dbv1.ReasonInstanceUnhealthy, fmt.Sprintf(
			"%s cannot follow the primary %s onto timeline %d (it received WAL of the lost primary the new one never had): rewinding it (pg_rewind)",
			d.Name, prim.Name, prim.Agent.Timeline))
		return
	}

	// A switchover the user asked for.
	if target, ok := db.Annotations[dbv1.AnnotationSwitchoverTo]; ok {
		if target == p.CurrentPrimary {
			p.Action = Action{Kind: ActRemoveAnnotation, Pod: target, Why: "it is the primary"}
		} else if why := switchoverRefusal(db, byName, prim, target); why != "" {
			p.Condition = conditions.False(t, dbv1.ReasonSwitchoverRefused, fmt.Sprintf(
				"annotation %s names %s, which cannot become the primary: %s; the primary stays %s",
				dbv1.AnnotationSwitchoverTo, target, why, p.CurrentPrimary))
			return
		} else {
			startSwitchover(p, target, "annotation "+dbv1.AnnotationSwitchoverTo)
			return
		}
	}

	// A primary that scaling removes hands over first.
	if prim.Ordinal >= n {
		if target := bestStandby(db, in.Instances, byName, prim, ""); target != "" {
			startSwitchover(p, target, fmt.Sprintf("spec.replicas is %d, so %s must go", n, prim.Name))
			return
		}
		p.Changing = true
		p.Condition = conditions.False(t, dbv1.ReasonInstanceUnhealthy, fmt.Sprintf(
			"spec.replicas is %d, so the primary %s must hand over first, and no standby with a lower ordinal streams from it", n, prim.Name))
		return
	}

	// A rollout (OnDelete): standbys first, then a switchover, then the
	// former primary as a standby.
	if in.UpdateRevision != "" {
		var outdated []*Instance
		for i := len(in.Instances) - 1; i >= 0; i-- {
			inst := &in.Instances[i]
			if inst.Exists && !inst.Terminating && inst.Ordinal < n && inst.Revision != "" && inst.Revision != in.UpdateRevision {
				outdated = append(outdated, inst)
			}
		}
		terminating := slices.ContainsFunc(in.Instances, func(i Instance) bool { return i.Terminating })
		if len(outdated) > 0 {
			p.Changing = true
			msg := fmt.Sprintf("%d instance(s) restart on revision %s, standbys first", len(outdated), in.UpdateRevision)
			p.Condition = conditions.False(t, dbv1.ReasonRollingUpdate, msg)
			if len(unhealthy) > 0 || terminating {
				p.Condition.Message += "; waiting for every instance to be healthy: " + strings.Join(unhealthy, "; ")
				return
			}
			for _, inst := range outdated {
				if inst.Name != p.CurrentPrimary {
					p.Action = Action{Kind: ActDeletePod, Pod: inst.Name, Why: "rollout to revision " + in.UpdateRevision}
					return
				}
			}
			if n == 1 {
				p.Action = Action{Kind: ActDeletePod, Pod: prim.Name, Why: "rollout to revision " + in.UpdateRevision + " (the only instance)"}
				return
			}
			if target := bestStandby(db, in.Instances, byName, prim, in.UpdateRevision); target != "" {
				startSwitchover(p, target, "rollout to revision "+in.UpdateRevision)
				p.Condition = conditions.False(t, dbv1.ReasonRollingUpdate, msg+fmt.Sprintf("; switching over to %s before the primary restarts", target))
				return
			}
			p.Condition.Message += "; no updated standby streams to switch over to"
			return
		}
	}

	if p.Action.Kind == ActRemoveAnnotation {
		p.Changing = true
	}
	if len(unhealthy) > 0 {
		p.Changing = true
		p.Condition = conditions.False(t, dbv1.ReasonInstanceUnhealthy, strings.Join(unhealthy, "; "))
		return
	}
	standbys := max(0, n-1)
	p.Condition = conditions.True(t, dbv1.ReasonReplicating, fmt.Sprintf("%s is the primary; %d standby(s) stream from it", p.CurrentPrimary, standbys))
}

func startSwitchover(p *Plan, target, why string) {
	p.TargetPrimary = target
	p.SwitchoverLSN = ""
	p.Changing = true
	p.Action = Action{Kind: ActStartSwitchover, Pod: target, From: p.CurrentPrimary, Why: why}
	p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonSwitchingOver,
		fmt.Sprintf("switching over from %s to %s (%s)", p.CurrentPrimary, target, why))
}

// switchoverRefusal says why target cannot become the primary, "" when it
// can.
func switchoverRefusal(db *dbv1.Database, byName map[string]*Instance, prim *Instance, target string) string {
	ord, isInstance := resources.InstanceOrdinal(db, target)
	inst := byName[target]
	switch {
	case !isInstance || inst == nil:
		return "it is not an instance of this Database"
	case ord >= replicas(db):
		return fmt.Sprintf("its ordinal %d is not below spec.replicas %d", ord, replicas(db))
	}
	if why := inst.problem(); why != "" {
		return why
	}
	if !inst.streaming() {
		return "it is not a streaming standby"
	}
	if inst.Agent.SystemID != prim.Agent.SystemID {
		return fmt.Sprintf("its system identifier %s is not the primary's %s", inst.Agent.SystemID, prim.Agent.SystemID)
	}
	if inst.Agent.Timeline != prim.Agent.Timeline {
		return fmt.Sprintf("it is on timeline %d, the primary on %d", inst.Agent.Timeline, prim.Agent.Timeline)
	}
	if lag, ok := lagBytes(prim.Agent, inst.Agent); !ok || lag > maxSwitchoverLag {
		return fmt.Sprintf("it lags %d bytes behind the primary (at most %d)", lag, maxSwitchoverLag)
	}
	return ""
}

// bestStandby is the streaming standby with an ordinal below
// spec.replicas (and of revision, when not empty) that lags least.
func bestStandby(db *dbv1.Database, insts []Instance, byName map[string]*Instance, prim *Instance, revision string) string {
	best, bestLag := "", int64(-1)
	for _, inst := range insts {
		if inst.Name == prim.Name || (revision != "" && inst.Revision != revision) {
			continue
		}
		if switchoverRefusal(db, byName, prim, inst.Name) != "" {
			continue
		}
		lag, _ := lagBytes(prim.Agent, inst.Agent)
		if best == "" || lag < bestLag {
			best, bestLag = inst.Name, lag
		}
	}
	return best
}

// decideSwitchover: targetPrimary differs from currentPrimary. Every step
// is derived from status and what the agents report, so a manager that
// stopped anywhere resumes at the right step. Once the old primary was
// demoted, the wait for the target is bounded (transitionTimeout): then
// the switchover falls back (fallBack).
func decideSwitchover(p *Plan, in Input, byName map[string]*Instance) {
	db := in.DB
	t := dbv1.ConditionReplicationReady
	p.Changing = true
	old, target := byName[p.CurrentPrimary], byName[p.TargetPrimary]
	msg := func(s string, args ...any) {
		p.Condition = conditions.False(t, dbv1.ReasonSwitchingOver,
			fmt.Sprintf("switching over from %s to %s: ", p.CurrentPrimary, p.TargetPrimary)+fmt.Sprintf(s, args...))
	}
	// wait says what the demoted switchover waits for, and falls back
	// once it has waited transitionTimeout.
	wait := func(why string) {
		msg("waiting for %s", why)
		if in.SwitchoverWaitSince.IsZero() || (target != nil && target.Agent != nil && target.Agent.State == agent.StatePromoting) {
			return
		}
		waited := in.Now.Sub(in.SwitchoverWaitSince)
		if waited < transitionTimeout {
			p.Condition.Message += fmt.Sprintf(" (the switchover falls back in %s)", (transitionTimeout - waited).Round(100*time.Millisecond))
			return
		}
		fallBack(p, in, byName, why)
	}
	targetPrimary := target != nil && target.reportsPrimary()
	oldPrimary := old != nil && old.reportsPrimary()
	switch {
	case targetPrimary && !oldPrimary:
		p.Action = Action{Kind: ActFinishSwitchover, Pod: p.TargetPrimary, From: p.CurrentPrimary, LSN: p.SwitchoverLSN}
		p.CurrentPrimary, p.SwitchoverLSN = p.TargetPrimary, ""
		msg("%s is the primary", p.TargetPrimary)
		if db.Annotations[dbv1.AnnotationSwitchoverTo] == "" {
			p.Condition = conditions.False(t, dbv1.ReasonSwitchingOver, fmt.Sprintf("%s is the primary", p.CurrentPrimary))
		}
	case targetPrimary && oldPrimary:
		msg("both report being the primary; neither is selected by the read-write Service")
	case oldPrimary && p.SwitchoverLSN == "" && old.Agent.State != agent.StateRunning:
		// A demote runs (a manager stopped during the call): its
		// standbys do not stream meanwhile, so this is no reason to give
		// up.
		msg("waiting for %s, which is %s", p.CurrentPrimary, old.Agent.State)
	case oldPrimary && p.SwitchoverLSN == "":
		if target == nil || !target.streaming() {
			// Nothing happened yet: give up rather than leave the
			// Database without a primary.
			why := "it does not exist"
			if target != nil {
				why = target.problem()
				if why == "" {
					why = "it is not a streaming standby"
				}
			}
			p.Action = Action{Kind: ActAbortSwitchover, Pod: p.TargetPrimary, From: p.CurrentPrimary, Why: why}
			p.Condition = conditions.False(t, dbv1.ReasonSwitchoverRefused, fmt.Sprintf(
				"the switchover from %s to %s was given up before the primary was demoted: %s is not ready to take over: %s",
				p.CurrentPrimary, p.TargetPrimary, p.TargetPrimary, why))
			if db.Annotations[dbv1.AnnotationSwitchoverTo] != "" {
				p.Condition.Message += fmt.Sprintf(" (annotation %s)", dbv1.AnnotationSwitchoverTo)
			}
			p.TargetPrimary = p.CurrentPrimary
			return
		}
		p.Action = Action{Kind: ActDemote, Pod: p.CurrentPrimary, From: p.CurrentPrimary}
		msg("demoting %s", p.CurrentPrimary)
	case oldPrimary:
		// Demoted, yet reporting primary still (it restarts): ask again.
		p.Action = Action{Kind: ActDemote, Pod: p.CurrentPrimary, From: p.CurrentPrimary}
		msg("%s still reports being the primary; demoting it", p.CurrentPrimary)
	case p.SwitchoverLSN == "":
		// Demoted, but the manager stopped before it recorded the
		// shutdown position: the old primary's own end of WAL is it.
		if old == nil || old.Agent == nil || old.Agent.Role != agent.RoleReplica {
			wait(fmt.Sprintf("the demoted %s to report its last position", p.CurrentPrimary))
			return
		}
		lsn := old.Agent.ReplayedLSN
		if a, ok := parseLSN(old.Agent.ReceivedLSN); ok {
			if b, ok := parseLSN(lsn); !ok || a > b {
				lsn = old.Agent.ReceivedLSN
			}
		}
		if lsn == "" {
			wait(fmt.Sprintf("the demoted %s to report its last position", p.CurrentPrimary))
			return
		}
		p.SwitchoverLSN = lsn
		p.Action = Action{Kind: ActRecordLSN, Pod: p.CurrentPrimary, LSN: lsn}
		msg("%s was demoted at %s", p.CurrentPrimary, lsn)
	default:
		if target == nil || target.Agent == nil || target.Agent.Role != agent.RoleReplica {
			why := "answer as a standby"
			if target != nil && !target.Exists {
				why += " (its pod does not exist)"
			} else if target != nil && target.Agent == nil && target.Err != "" {
				why += " (its agent does not answer: " + conditions.Quote(target.Err, 120) + ")"
			}
			wait(fmt.Sprintf("%s to %s", p.TargetPrimary, why))
			return
		}
		if target.Agent.State == agent.StatePromoting {
			// A promotion that outlasted its call goes on in the
			// agent, which would answer another promote 409 (busy).
			wait(fmt.Sprintf("%s to finish its promotion", p.TargetPrimary))
			return
		}
		want, _ := parseLSN(p.SwitchoverLSN)
		have, ok := parseLSN(target.Agent.ReplayedLSN)
		if !ok || have < want {
			wait(fmt.Sprintf("%s to replay up to %s (it replayed %s)", p.TargetPrimary, p.SwitchoverLSN, target.Agent.ReplayedLSN))
			return
		}
		p.Action = Action{Kind: ActPromote, Pod: p.TargetPrimary, From: p.CurrentPrimary, LSN: p.SwitchoverLSN}
		msg("promoting %s, which replayed up to %s", p.TargetPrimary, p.SwitchoverLSN)
	}
}

// lagBytes is how far the standby's replayed position is behind the
// primary's current one.
func lagBytes(prim, standby *agent.Status) (int64, bool) {
	if prim == nil || standby == nil {
		return 0, false
	}
	cur, ok1 := parseLSN(prim.CurrentLSN)
	rep, ok2 := parseLSN(standby.ReplayedLSN)
	if !ok1 || !ok2 {
		return 0, false
	}
	if rep >= cur {
		return 0, true
	}
	return int64(cur - rep), true
}

// rows are status.replication.instances.
func rows(in Input, current string) []dbv1.InstanceStatus {
	var prim *agent.Status
	for _, inst := range in.Instances {
		if inst.Name == current && inst.reportsPrimary() {
			prim = inst.Agent
		}
	}
	var out []dbv1.InstanceStatus
	for _, inst := range in.Instances {
		if !inst.Exists && inst.Ordinal >= replicas(in.DB) {
			continue
		}
		row := dbv1.InstanceStatus{Name: inst.Name}
		switch {
		case inst.Agent != nil:
			a := inst.Agent
			row.Role, row.State, row.Ready = string(a.Role), string(a.State), a.Ready
			row.Timeline = int64(a.Timeline)
			if prev := recordedRow(in.DB, inst.Name); prev != nil && a.WALReceiver != "streaming" && prev.Timeline > row.Timeline {
				// A standby without a WAL receiver reports its last
				// restartpoint's timeline, which lags a timeline switch
				// by up to checkpoint_timeout; an instance's timeline
				// never goes back, so the highest it reported stands.
				row.Timeline = prev.Timeline
			}
			row.CurrentLSN, row.ReceivedLSN, row.ReplayedLSN = a.CurrentLSN, a.ReceivedLSN, a.ReplayedLSN
			row.WALReceiver, row.Message = a.WALReceiver, a.Message
			if a.Role == agent.RoleReplica {
				if lag, ok := lagBytes(prim, a); ok {
					row.LagBytes = &lag
				}
			}
		case inst.Err != "":
			row.State, row.Message = StateUnreachable, conditions.Quote(inst.Err, 200)
			row.CurrentLSN = lastCurrentLSN(in.DB, inst.Name, current)
		case !inst.Exists:
			row.Message = "the pod does not exist"
			row.CurrentLSN = lastCurrentLSN(in.DB, inst.Name, current)
		case inst.Terminating:
			row.Message = "the pod is being deleted"
			row.CurrentLSN = lastCurrentLSN(in.DB, inst.Name, current)
		default:
			row.Message = "the pod has no IP yet"
		}
		out = append(out, row)
	}
	return out
}

// lastCurrentLSN is the last current position recorded for the primary
// pod, kept while it does not answer: a failover reports what the promoted
// standby lacked of it.
func lastCurrentLSN(db *dbv1.Database, pod, current string) string {
	if row := recordedRow(db, pod); row != nil && pod == current {
		return row.CurrentLSN
	}
	return ""
}

// recordedRow is pod's row in status.replication.instances, nil when it
// has none.
func recordedRow(db *dbv1.Database, pod string) *dbv1.InstanceStatus {
	r := db.Status.Replication
	if r == nil {
		return nil
	}
	for i := range r.Instances {
		if r.Instances[i].Name == pod {
			return &r.Instances[i]
		}
	}
	return nil
}

// readGrace is how long after a switchover or failover finished the
// standbys that had the replica label keep it without streaming: each
// one's WAL receiver tries again every wal_retrieve_retry_interval (5 s)
// and reaches the new primary once kube-proxy follows its label (about a
// second), so two attempts.
const readGrace = 10 * time.Second

// labels are the role labels: primary on the recorded primary that alone
// reports being one (or answered as one a moment ago and is merely slow:
// slowPrimary), while no switchover runs; replica on streaming standbys,
// and, while no primary serves (a switchover, a lost primary, a failover)
// and just after, on the standbys that had it and still take read-only
// connections, so that <name>-ro keeps its endpoints: only the instance
// being promoted or demoted leaves it; none on every instance in doubt.
func labels(in Input, p Plan, primaries int) map[string]string {
	out := map[string]string{}
	switching := p.TargetPrimary != "" && p.TargetPrimary != p.CurrentPrimary
	serving := false
	for i := range in.Instances {
		if inst := &in.Instances[i]; inst.Name == p.CurrentPrimary {
			serving = !switching && inst.healthyPrimary() && inst.claimsPrimary()
		}
	}
	settled := in.SettledAt
	if f := p.LastFailover; f != nil && f.FinishedAt != nil && f.FinishedAt.After(settled) {
		settled = f.FinishedAt.Time
	}
	keepReaders := !serving || p.Action.Kind == ActFinishSwitchover || p.Action.Kind == ActFinishFailover ||
		(!settled.IsZero() && in.Now.Sub(settled) < readGrace)
	for _, inst := range in.Instances {
		if !inst.Exists || inst.Terminating {
			continue
		}
		role := ""
		switch {
		case inst.Name == p.CurrentPrimary && !switching && primaries == 1 && inst.healthyPrimary() &&
			(inst.Agent.Lease == nil || inst.Agent.Lease.Held):
			role = dbv1.RolePrimary
		case inst.Name == p.CurrentPrimary && !switching && primaries == 0 && inst.slowPrimary(in.Now):
			role = dbv1.RolePrimary
		case inst.Name == p.CurrentPrimary || primaries > 1 || (switching && inst.Name == p.TargetPrimary):
			// the primary, being demoted or promoted, or in doubt
		case inst.streaming():
			role = dbv1.RoleReplica
		case keepReaders && inst.Label == dbv1.RoleReplica && inst.readable(p.SystemID):
			role = dbv1.RoleReplica
		}
		out[inst.Name] = role
	}
	return out
}

// readable: a standby that runs and takes read-only connections (a hot
// standby does only once it reached a consistent state), of the
// Database's system, streaming or not.
func (i *Instance) readable(systemID string) bool {
	return i.Agent != nil && i.Agent.Role == agent.RoleReplica && i.Agent.State == agent.StateRunning && i.Agent.Ready &&
		i.PodReady && !i.Terminating && (systemID == "" || i.Agent.SystemID == systemID)
}

// slowPrimary: the primary's agent did not answer within statusTimeout
// this time, but its pod is Ready, it carries the primary label, and its
// last answer, less than LeaseRenewDeadline ago (by then a primary that
// cannot renew its lease has fenced itself), was a running primary
// holding the lease. One slow answer of a loaded primary does not take
// the read-write Service's endpoint away.
func (i *Instance) slowPrimary(now time.Time) bool {
	a := i.LastAnswer
	return i.Agent == nil && i.TimedOut && i.PodReady && !i.Terminating && i.Label == dbv1.RolePrimary &&
		a != nil && a.Role == agent.RolePrimary && a.State == agent.StateRunning && a.Ready && (a.Lease == nil || a.Lease.Held) &&
		now.Sub(i.LastAnswerAt) < agent.LeaseRenewDeadline
}

// rejoinAfter is how long after a failover a standby behind the new
// primary's timeline may take to follow it before it is rewound: a
// standby that streams switches timelines within a second or two.
const rejoinAfter = 20 * time.Second

// divergedStandby is a running standby that, rejoinAfter after the last
// failover finished, is still on an older timeline than the primary and
// does not stream: it received WAL of the lost primary that the promoted
// one never had (a frozen primary's walsender woke before its agent
// fenced it), so PostgreSQL cannot follow the new timeline until the
// standby is rewound. nil when there is none.
func divergedStandby(in Input, prim *Instance) *Instance {
	st := in.DB.Status.Replication
	if st == nil || st.LastFailover == nil || st.LastFailover.FinishedAt == nil ||
		in.Now.Sub(st.LastFailover.FinishedAt.Time) < rejoinAfter || prim.Agent == nil {
		return nil
	}
	for i := range in.Instances {
		inst := &in.Instances[i]
		a := inst.Agent
		if inst.Name == prim.Name || a == nil || inst.Terminating || inst.Ordinal >= replicas(in.DB) {
			continue
		}
		if a.Role == agent.RoleReplica && a.State == agent.StateRunning && a.WALReceiver != "streaming" && a.Timeline < prim.Agent.Timeline {
			return inst
		}
	}
	return nil
}
