// Package service is the controller of a Database's Services: the
// read-write client Service (the primary), the read-only Service (the
// ready standbys) and the headless governing Service. It owns the
// ServiceReady condition and status.endpoint. Until spec.bootstrap's
// restore has finished the client and read-only Services select no pod,
// and the controller watches the backup controller's status write that
// says the restore finished.
package service

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// Name is the controller's name in --controllers.
const Name = "service"

// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases,verbs=get;list;watch
// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// ReasonServicePortsRestored is the reason of the Event of a Service whose
// ports somebody else changed and dbkeeper set back.
const ReasonServicePortsRestored = "ServicePortsRestored"

// Controller is the service controller.
type Controller struct{}

// New returns the service controller.
func New() Controller { return Controller{} }

// Name implements controller.Controller.
func (Controller) Name() string { return Name }

// ConditionType implements controller.Controller.
func (Controller) ConditionType() string { return dbv1.ConditionServiceReady }

// SetupWithManager implements controller.Controller.
func (c Controller) SetupWithManager(mgr ctrl.Manager, o facet.Options) error {
	w := facet.NewWriter(mgr, Name)
	s := newSyncer(mgr.GetClient(), w)
	s.networkPolicies, s.manager = o.NetworkPolicies, o.Manager
	r := facet.NewReconciler(mgr.GetClient(), w, c.ConditionType(), s, o)
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&dbv1.Database{}, builder.WithPredicates(predicate.Or(facet.DatabaseChanged(), restoreFinishedChanged()))).
		Owns(&corev1.Service{}).
		Owns(&networkingv1.NetworkPolicy{}).
		WithOptions(facet.ControllerOptions(o)).
		Complete(r)
}

// SetupDisabled implements controller.Controller.
func (c Controller) SetupDisabled(mgr ctrl.Manager, o facet.Options) error {
	return facet.SetupDisabled(mgr, Name, c.ConditionType(), o)
}

// syncer keeps the client, read-only and headless Services, and the
// engine pods' NetworkPolicy.
type syncer struct {
	client client.Client
	// writer applies the Services and records the Events of the repairs
	// on the Database.
	writer *facet.Writer
	// networkPolicies keeps a NetworkPolicy for each Database that does
	// not turn it off; manager is how the policies name the manager.
	networkPolicies bool
	manager         resources.ManagerPeer
}

// newSyncer is the service syncer that reads and patches with c, and
// applies and records Events with w.
func newSyncer(c client.Client, w *facet.Writer) *syncer {
	return &syncer{client: c, writer: w}
}

func (s *syncer) Sync(ctx context.Context, db *dbv1.Database) (facet.Outcome, error) {
	eng, err := engine.For(db.Spec.Engine)
	if err != nil {
		return facet.Outcome{}, reconcile.TerminalError(err)
	}
	for _, desired := range []*corev1ac.ServiceApplyConfiguration{
		resources.ClientService(db, eng),
		resources.ReadOnlyService(db, eng),
		resources.HeadlessService(db, eng),
	} {
		if err := s.apply(ctx, db, desired); err != nil {
			return facet.Outcome{}, err
		}
	}
	policy, err := s.syncNetworkPolicy(ctx, db, eng.Port())
	if err != nil {
		return facet.Outcome{}, err
	}
	names := fmt.Sprintf("Services %s (read-write), %s (read-only) and %s are in place; %s",
		resources.ClientServiceName(db), resources.ReadOnlyServiceName(db), resources.HeadlessServiceName(db), policy)
	cond := conditions.True(dbv1.ConditionServiceReady, dbv1.ReasonServicesReady, names)
	if !resources.RestoreFinished(db) {
		cond = conditions.True(dbv1.ConditionServiceReady, dbv1.ReasonWaitingForRestore, fmt.Sprintf(
			"%s; %s and %s select no pod until spec.bootstrap's restore has finished (see BackupReady)",
			names, resources.ClientServiceName(db), resources.ReadOnlyServiceName(db)))
	}
	return facet.Outcome{
		Condition: cond,
		Status:    dbv1ac.DatabaseStatus().WithEndpoint(resources.Endpoint(db, eng.Port())),
	}, nil
}

// syncNetworkPolicy applies the engine pods' NetworkPolicy, or deletes the
// one dbkeeper made when it is off (the manager's --network-policies, or
// spec.networkPolicy.enabled), and says which.
func (s *syncer) syncNetworkPolicy(ctx context.Context, db *dbv1.Database, port int32) (string, error) {
	name := resources.NetworkPolicyName(db)
	live, err := apply.Live(ctx, s.client, client.ObjectKey{Namespace: db.Namespace, Name: name}, &networkingv1.NetworkPolicy{})
	if err != nil {
		return "", fmt.Errorf("getting NetworkPolicy %s: %w", name, err)
	}
	if s.networkPolicies && db.Spec.NetworkPolicyEnabled() {
		if _, err := s.writer.Apply(ctx, live, resources.NetworkPolicy(db, port, s.manager)); err != nil {
			return "", fmt.Errorf("applying NetworkPolicy %s: %w", name, err)
		}
		from := "every pod of the namespace"
		if n := len(db.Spec.NetworkPolicy.AllowFrom); n > 0 {
			from = fmt.Sprintf("the %d peers of spec.networkPolicy.allowFrom", n)
		}
		return fmt.Sprintf("NetworkPolicy %s admits %s, the Database's pods and the manager", name, from), nil
	}
	why := "spec.networkPolicy.enabled is false"
	if !s.networkPolicies {
		why = "the manager runs with --network-policies=false"
	}
	if live != nil && resources.Belongs(db, live) {
		log.FromContext(ctx).Info("Deleting NetworkPolicy: "+why, "NetworkPolicy", klog.KObj(live))
		if err := s.client.Delete(ctx, live, client.Preconditions{UID: &live.UID}); client.IgnoreNotFound(err) != nil {
			return "", fmt.Errorf("deleting NetworkPolicy %s: %w", name, err)
		}
	}
	return "no NetworkPolicy: " + why, nil
}

func (s *syncer) apply(ctx context.Context, db *dbv1.Database, desired *corev1ac.ServiceApplyConfiguration) error {
	live, err := apply.Live(ctx, s.client, client.ObjectKey{Namespace: *desired.Namespace, Name: *desired.Name}, &corev1.Service{})
	if err != nil {
		return fmt.Errorf("getting Service %s: %w", *desired.Name, err)
	}
	if live != nil && hasForeignPorts(live, desired) {
		if err := s.replacePorts(ctx, db, live, desired); err != nil {
			return err
		}
		live = nil // apply, to own the ports again
	}
	if _, err := s.writer.Apply(ctx, live, desired); err != nil {
		return fmt.Errorf("applying Service %s: %w", *desired.Name, err)
	}
	return nil
}

// restoreFinishedChanged lets through the status write of the backup
// controller that records (or, with a Database re-created without status,
// lacks) spec.bootstrap's finished restore, which opens the client Service;
// DatabaseChanged ignores status writes.
func restoreFinishedChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, okOld := e.ObjectOld.(*dbv1.Database)
			updated, okNew := e.ObjectNew.(*dbv1.Database)
			return okOld && okNew && resources.RestoreFinished(old) != resources.RestoreFinished(updated)
		},
	}
}

func (s *syncer) CurrentStatus(db *dbv1.Database) *dbv1ac.DatabaseStatusApplyConfiguration {
	if db.Status.Endpoint == "" {
		return nil
	}
	return dbv1ac.DatabaseStatus().WithEndpoint(db.Status.Endpoint)
}

// hasForeignPorts reports whether the live Service has a port dbkeeper does
// not declare, as after `kubectl edit` changed a port number. Server-side
// apply keeps such a port (it belongs to whoever wrote it) next to
// dbkeeper's, and the API server refuses the pair for their equal names.
func hasForeignPorts(live *corev1.Service, desired *corev1ac.ServiceApplyConfiguration) bool {
	type key struct {
		port     int32
		protocol corev1.Protocol
	}
	declared := map[key]bool{}
	for _, p := range desired.Spec.Ports {
		declared[key{ptr.Deref(p.Port, 0), ptr.Deref(p.Protocol, corev1.ProtocolTCP)}] = true
	}
	for _, p := range live.Spec.Ports {
		if !declared[key{p.Port, p.Protocol}] {
			return true
		}
	}
	return false
}

// replacePorts sets the Service's ports to exactly dbkeeper's with a JSON
// merge patch, which replaces a list whole: the ports of a dbkeeper Service
// are dbkeeper's alone. The apply that follows takes their ownership back.
func (s *syncer) replacePorts(ctx context.Context, db *dbv1.Database, live *corev1.Service, desired *corev1ac.ServiceApplyConfiguration) error {
	log.FromContext(ctx).Info("Restoring Service ports changed by somebody else", "Service", klog.KObj(live))
	data, err := json.Marshal(map[string]any{"spec": map[string]any{"ports": desired.Spec.Ports}})
	if err != nil {
		return fmt.Errorf("encoding the ports of Service %s: %w", live.Name, err)
	}
	if err := s.client.Patch(ctx, live, client.RawPatch(types.MergePatchType, data), client.FieldOwner(facet.FieldOwner(Name))); err != nil {
		return fmt.Errorf("replacing the ports of Service %s: %w", live.Name, err)
	}
	s.writer.Eventf(db, live, corev1.EventTypeNormal, ReasonServicePortsRestored, "RestorePorts",
		"Restored the ports of Service %s changed by somebody else", live.Name)
	return nil
}
