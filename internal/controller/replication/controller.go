package replication

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// Name is the controller's name in --controllers.
const Name = "replication"

// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
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
	// ReasonAgentUpgraded: an agent replaced itself in place with the
	// manager's build, its server running on; ReasonAgentUpgradeRefused:
	// it did not take the build (the message quotes why), tried again
	// after agentRefusalTTL.
	ReasonAgentUpgraded       = "AgentUpgraded"
	ReasonAgentUpgradeRefused = "AgentUpgradeRefused"
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
	s := &syncer{client: mgr.GetClient(), reader: mgr.GetAPIReader(), writer: w, agents: o.AgentsOf(mgr), instances: o.Instances, now: time.Now,
		binary: o.AgentBinary}
	r := facet.NewReconciler(mgr.GetClient(), w, c.ConditionType(), s, o)
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, indexPodNode, podNode); err != nil {
		return fmt.Errorf("indexing pods by node: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&dbv1.Database{}, facet.ForDatabase()).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(facet.DatabaseOf(resources.ComponentDatabase)),
			builder.WithPredicates(podChanged())).
		Watches(&appsv1.StatefulSet{}, handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &dbv1.Database{})).
		// a cordon of the primary's node starts a switchover
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(databasesOnNode(mgr.GetClient())),
			builder.WithPredicates(nodeDrainChanged())).
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
	// binary is the build the agents are brought to in place, nil: none
	// (facet.Options.AgentBinary); refused maps a pod's UID to the
	// agentRefusal of its agent (lost on restart).
	binary  *instance.AgentBinary
	refused sync.Map
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
	status *agentapi.Status
	at     time.Time
}

// waitMark is a switchover's step and since when.
type waitMark struct {
	step  string
	since time.Time
}
