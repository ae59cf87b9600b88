package replication

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// StateUnreachable is the state of an instance whose agent did not answer.
const StateUnreachable = "Unreachable"

// Instance is one instance (pod) of a Database as the controller sees it.
type Instance struct {
	Name    string
	Ordinal int
	// Exists says the pod exists; Terminating that it is being deleted.
	Exists, Terminating bool
	// PodReady is the pod's Ready condition.
	PodReady bool
	// Revision is the pod's controller-revision-hash, RestartHash its
	// resources.AnnotationRestartHash (empty on a pod made before it).
	Revision    string
	RestartHash string
	// Label is the pod's role label, empty when it has none.
	Label string
	// Agent is what the pod's agent answered, nil when it was not asked
	// (no pod, no IP, terminating) or did not answer (Err says why).
	Agent *agentapi.Status
	Err   string
	// LastAnswer is the agent's last answer this manager saw, when it
	// did not answer now (the full volume of a primary that went away),
	// and LastAnswerAt when it came.
	LastAnswer   *agentapi.Status
	LastAnswerAt time.Time
	// TimedOut says the agent was asked and did not answer within
	// statusTimeout (a loaded or frozen pod, not a refused connection).
	TimedOut bool
	// Node is the node the pod runs on, and NodeDrain why that node is
	// being emptied (cordoned, or tainted by an autoscaler that removes
	// it), "" when it is not.
	Node, NodeDrain string
}

// Input is everything a decision is made from.
type Input struct {
	DB *dbv1.Database
	// Instances are in ordinal order.
	Instances []Instance
	// UpdateRevision is the StatefulSet's status.updateRevision, and
	// RestartHash its template's resources.AnnotationRestartHash.
	UpdateRevision string
	RestartHash    string
	// EngineVersion is the major the StatefulSet's template runs, and
	// UpgradeFrom the major it upgrades data directories from in place
	// (resources.AnnotationEngineVersion, AnnotationUpgradeFrom); empty
	// without them.
	EngineVersion, UpgradeFrom string
	// AgentBuild is the build the agents are brought to in place
	// (upgradeAgents), nil when they are not. With it, a pod whose restart
	// hash is the template's is current whatever its revision
	// (runsTemplate); without it a new agent image would reach no running
	// pod that way (docs/design/upgrades.md). AgentRefused maps the pods
	// whose agent refused the build lately to why.
	AgentBuild   *instance.AgentBinary
	AgentRefused map[string]string
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
	// ActUpgradeAgent sends the agent of Action.Pod the manager's build,
	// which it replaces itself with in place (upgradeAgents).
	ActUpgradeAgent ActionKind = "UpgradeAgent"
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
	// MajorUpgrade is status.replication.majorUpgrade after the action.
	MajorUpgrade *dbv1.MajorUpgradeStatus
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
	v, err := agentapi.ParseLSN(s)
	return v, err == nil
}
