// Package statefulset is the controller of the StatefulSet that runs a
// Database's engine and of the engine pods' PodDisruptionBudget. It owns
// the StatefulSetReady condition and the replica counts and selector in
// the Database's status.
package statefulset

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// Name is the controller's name in --controllers.
const Name = "statefulset"

// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases,verbs=get;list;watch
// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases/status,verbs=get;patch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;patch;update

// ReasonVolumeGrowing is the reason of the Event of a data PVC that
// dbkeeper asks for the grown spec.storage.size.
const ReasonVolumeGrowing = "VolumeGrowing"

// Controller is the statefulset controller.
type Controller struct{}

// New returns the statefulset controller.
func New() Controller { return Controller{} }

// Name implements controller.Controller.
func (Controller) Name() string { return Name }

// ConditionType implements controller.Controller.
func (Controller) ConditionType() string { return dbv1.ConditionStatefulSetReady }

// SetupWithManager implements controller.Controller.
func (c Controller) SetupWithManager(mgr ctrl.Manager, o facet.Options) error {
	w := facet.NewWriter(mgr, Name)
	s := newSyncer(mgr.GetClient(), w)
	s.engines = o.Engines
	s.agentImage, s.agentsTakeOver = o.AgentImage, o.AgentBinary != nil
	s.marks.Key = o.MarkerKey
	r := facet.NewReconciler(mgr.GetClient(), w, c.ConditionType(), s, o)
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		// The StatefulSet's replicas never drop below the current or
		// target primary (resources.Instances): a switchover's end, which
		// is only a status change, may let a scale-down go on.
		For(&dbv1.Database{}, builder.WithPredicates(predicate.Or(facet.DatabaseChanged(), primaryChanged(), restartRevisionChanged()))).
		Owns(&appsv1.StatefulSet{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		// The primary Lease changes with every renewal (every 2 s): only
		// its deletion is news (it is created again at once: the holder
		// fences itself when it cannot renew).
		Owns(&coordinationv1.Lease{}, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(event.UpdateEvent) bool { return false },
		})).
		// The engine pods say why replicas are not ready; they belong to
		// the StatefulSet, so they map to the Database by their labels.
		// The manager caches only the pods dbkeeper labelled.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(facet.DatabaseOf(resources.ComponentDatabase)),
			builder.WithPredicates(podStatusChanged())).
		WithOptions(facet.ControllerOptions(o)).
		Complete(r)
}

// superuserMade refuses (facet.NotOursError) a superuser Secret dbkeeper
// did not make while the Database does not use its credentials yet: the
// engine pods' initdb takes the superuser's password from it, and one
// planted under its name before the Database existed would choose it.
func (s *syncer) superuserMade(ctx context.Context, db *dbv1.Database) error {
	if facet.InUse(db) || len(s.marks.Key) == 0 {
		return nil
	}
	name := resources.SuperuserSecretName(db)
	partial := &metav1.PartialObjectMetadata{}
	partial.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	version := ""
	if cached, err := apply.Live(ctx, s.client, client.ObjectKey{Namespace: db.Namespace, Name: name}, partial); err != nil {
		return fmt.Errorf("getting Secret %s: %w", name, err)
	} else if cached != nil {
		version = cached.ResourceVersion
	}
	_, _, err := s.marks.Check(ctx, s.client, db, name, version)
	return err
}

// SetupDisabled implements controller.Controller.
func (c Controller) SetupDisabled(mgr ctrl.Manager, o facet.Options) error {
	return facet.SetupDisabled(mgr, Name, c.ConditionType(), o)
}

// syncer keeps the StatefulSet and its data PVCs.
type syncer struct {
	client client.Client
	// writer applies the StatefulSet and the grown PVCs and records the
	// Events of the repairs and diagnoses on the Database.
	writer *facet.Writer
	// engines is the image catalog; the zero one is the built-in.
	engines engine.Catalog
	// agentImage is the image the pods copy the agent from (--agent-image).
	agentImage string
	// agentsTakeOver says the agents of running pods are brought to a new
	// build in place (facet.Options.AgentBinary).
	agentsTakeOver bool
	// marks verifies the superuser Secret before the first pods start
	// (superuserMade).
	marks facet.Marks
}

// newSyncer is the statefulset syncer that reads with c, and applies and
// records Events with w.
func newSyncer(c client.Client, w *facet.Writer) *syncer {
	return &syncer{client: c, writer: w}
}

func (s *syncer) Sync(ctx context.Context, db *dbv1.Database) (facet.Outcome, error) {
	eng, err := s.engines.For(db.Spec.Engine)
	if err != nil {
		return facet.Outcome{}, reconcile.TerminalError(err)
	}
	if err := s.superuserMade(ctx, db); err != nil {
		return facet.Outcome{}, err
	}
	live, err := apply.Live(ctx, s.client, client.ObjectKey{Namespace: db.Namespace, Name: resources.StatefulSetName(db)}, &appsv1.StatefulSet{})
	if err != nil {
		return facet.Outcome{}, fmt.Errorf("getting StatefulSet: %w", err)
	}
	desired, err := resources.UpgradingStatefulSet(db, eng, resources.TLSFor(db, live).On(), s.agentImage, resources.MajorUpgradeOf(db, live))
	if err != nil {
		return facet.Outcome{}, reconcile.TerminalError(err)
	}
	resources.PinClaimTemplate(desired, live)
	resources.PinLegacyEnv(desired, live)
	// The access of the pods first: a ServiceAccount of their name that
	// is not this Database's (facet.NotOursError) stops the StatefulSet
	// before its pods could run as it. Each apply checks the Database on
	// the API server first (facet.Writer.Apply), so that nothing of an
	// orphaned Database is adopted back.
	if err := s.syncLeaseAccess(ctx, db); err != nil {
		return facet.Outcome{}, err
	}
	changed, err := s.writer.Apply(ctx, live, desired)
	if err != nil {
		return facet.Outcome{}, fmt.Errorf("applying StatefulSet: %w", err)
	}
	if live != nil {
		if err := s.growVolumes(ctx, db); err != nil {
			return facet.Outcome{}, err
		}
	}
	if err := s.syncDisruptionBudgets(ctx, db); err != nil {
		return facet.Outcome{}, err
	}

	// The pods are read only when a replica is not ready (they can say
	// why), or pods of an older revision may run the template's all but
	// the agent, which the agents take over in place.
	var pods []corev1.Pod
	want := resources.Instances(db)
	if live != nil && !changed && (live.Status.ReadyReplicas < want || s.agentsTakeOver && rollingOut(live, want)) {
		if pods, err = s.enginePods(ctx, db); err != nil {
			return facet.Outcome{}, err
		}
	}
	inPlace := live != nil && s.agentsTakeOver && runsTemplateInPlace(db, live, pods, want)
	out := facet.Outcome{Condition: observe(db, live, changed, pods, inPlace), Status: s.CurrentStatus(db)}
	s.recordDiagnosis(db, out.Condition)
	if live != nil {
		out.Status.WithReplicas(live.Status.Replicas).WithReadyReplicas(live.Status.ReadyReplicas)
	}
	return out, nil
}

// syncDisruptionBudgets keeps the engine pods' two PodDisruptionBudgets
// (the standbys', and the primary's that refuses its eviction) while the
// Database runs two instances or more, and deletes them below.
func (s *syncer) syncDisruptionBudgets(ctx context.Context, db *dbv1.Database) error {
	for _, want := range []*policyv1ac.PodDisruptionBudgetApplyConfiguration{resources.PodDisruptionBudget(db), resources.PrimaryDisruptionBudget(db)} {
		if err := s.syncDisruptionBudget(ctx, db, want); err != nil {
			return err
		}
	}
	return nil
}

// syncDisruptionBudget applies one budget, or deletes it when the Database
// runs fewer than two instances.
func (s *syncer) syncDisruptionBudget(ctx context.Context, db *dbv1.Database, want *policyv1ac.PodDisruptionBudgetApplyConfiguration) error {
	key := client.ObjectKey{Namespace: db.Namespace, Name: *want.Name}
	live, err := apply.Live(ctx, s.client, key, &policyv1.PodDisruptionBudget{})
	if err != nil {
		return fmt.Errorf("getting PodDisruptionBudget %s: %w", key.Name, err)
	}
	if resources.WantsPodDisruptionBudget(db) {
		if _, err := s.writer.Apply(ctx, live, want); err != nil {
			return fmt.Errorf("applying PodDisruptionBudget %s: %w", key.Name, err)
		}
		return nil
	}
	if live == nil || !metav1.IsControlledBy(live, db) {
		return nil
	}
	log.FromContext(ctx).Info("Deleting PodDisruptionBudget: fewer than two instances", "PodDisruptionBudget", klog.KObj(live))
	err = s.client.Delete(ctx, live, client.Preconditions{UID: ptr.To(live.UID)})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting PodDisruptionBudget %s: %w", key.Name, err)
	}
	return nil
}

// growVolumes asks each data PVC for the grown spec.storage.size: the
// StatefulSet's claim template cannot change, its PVCs can.
func (s *syncer) growVolumes(ctx context.Context, db *dbv1.Database) error {
	pvcs := &corev1.PersistentVolumeClaimList{}
	sel := labels.SelectorFromSet(resources.Labels(db, resources.ComponentDatabase))
	if err := s.client.List(ctx, pvcs, client.InNamespace(db.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return fmt.Errorf("listing data PVCs: %w", err)
	}
	want := db.Spec.DataSize()
	for i := range pvcs.Items {
		pvc := &pvcs.Items[i]
		have := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		if have.Cmp(want) >= 0 {
			continue
		}
		log.FromContext(ctx).Info("Growing data PVC", "PersistentVolumeClaim", klog.KObj(pvc), "from", have.String(), "to", want.String())
		grow := corev1ac.PersistentVolumeClaim(pvc.Name, pvc.Namespace).
			WithSpec(corev1ac.PersistentVolumeClaimSpec().WithResources(corev1ac.VolumeResourceRequirements().
				WithRequests(corev1.ResourceList{corev1.ResourceStorage: want})))
		if _, err := s.writer.Apply(ctx, pvc, grow); err != nil {
			return fmt.Errorf("growing PVC %s: %w", pvc.Name, err)
		}
		s.writer.Eventf(db, pvc, corev1.EventTypeNormal, ReasonVolumeGrowing, "GrowVolume",
			"Growing data PVC %s from %s to %s", pvc.Name, have.String(), want.String())
	}
	return nil
}

func (s *syncer) CurrentStatus(db *dbv1.Database) *dbv1ac.DatabaseStatusApplyConfiguration {
	st := dbv1ac.DatabaseStatus().
		WithReplicas(db.Status.Replicas).
		WithReadyReplicas(db.Status.ReadyReplicas)
	sel := labels.SelectorFromSet(resources.PodSelectorLabels(db)).String()
	return st.WithSelector(sel)
}

// primaryChanged lets through the Database updates whose current or
// target primary changed.
func primaryChanged() predicate.Predicate { return statusChanged(primaries) }

// statusChanged lets through the Database updates that change what of
// reads of it (a part of the status the other facets write).
func statusChanged[T comparable](of func(*dbv1.Database) T) predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*dbv1.Database)
			n, ok2 := e.ObjectNew.(*dbv1.Database)
			return ok1 && ok2 && of(o) != of(n)
		},
	}
}

// restartRevisionChanged lets through the status writes of the
// configuration controller that change status.configuration.restartRevision:
// the pods' template carries it.
func restartRevisionChanged() predicate.Predicate { return statusChanged(restartRevision) }

func restartRevision(db *dbv1.Database) string {
	if db.Status.Configuration == nil {
		return ""
	}
	return db.Status.Configuration.RestartRevision
}

func primaries(db *dbv1.Database) [2]string {
	if db.Status.Replication == nil {
		return [2]string{}
	}
	return [2]string{db.Status.Replication.CurrentPrimary, db.Status.Replication.TargetPrimary}
}
