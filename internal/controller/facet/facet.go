// Package facet is what every facet controller shares: the reconcile loop
// around a Syncer (fetch the Database, leave deletion to cleanup, honour
// spec.paused, report one condition), the predicates on the Database, and
// the stand-in that reports ControllerDisabled when a facet is switched off.
package facet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/marker"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// Options are the settings every controller of the manager gets.
type Options struct {
	// MaxConcurrentReconciles is the number of Databases a controller
	// reconciles at once.
	MaxConcurrentReconciles int
	// Facets are the condition types of the enabled facet controllers, in
	// the order the Ready summary reads them.
	Facets []string
	// WaitForFinalizer makes facet controllers create nothing until the
	// cleanup controller has added its finalizer; true when cleanup runs.
	WaitForFinalizer bool
	// Engines is the image catalog the controllers that build pods run
	// engines from; the zero Catalog is the built-in one.
	Engines engine.Catalog
	// Instances connects to the Databases' servers (instance 0) for the
	// controllers that run SQL in them.
	Instances instance.Connector
	// Agents reaches the agents of the Databases' instances, for the
	// replication controller; nil means instance.PodAgents (the pods'
	// IPs). Tests without agents (envtest, kwok) pass a stand-in.
	Agents instance.Agents
	// SecretMetadata is a cache of the metadata of every Secret in the
	// watched namespaces, labelled or not (manager.SecretMetadataCacheOptions),
	// for the watch of the users' Secrets; nil where no such watch runs.
	SecretMetadata cache.Cache
	// Secrets reads Secret data for the agents' token, the CA and the
	// superuser's password (instance.SecretReader: from the API server,
	// again only once a Secret changed); nil: the manager's API reader.
	Secrets client.Reader
	// TLSCertDuration is the lifetime of the server certificates the tls
	// controller issues (renewed at two thirds of it); zero is 90 days.
	TLSCertDuration time.Duration
	// SkipTLSServerProbe stops the tls controller from connecting to the
	// engine pods to learn which certificate they serve (and so from
	// reloading them after a renewal): for fake nodes, whose pods have
	// addresses nothing answers on.
	SkipTLSServerProbe bool
	// AgentImage is the image whose `/manager copy-self` the engine pods'
	// init container runs to copy the instance agent into the pod: the
	// manager's own image (--agent-image).
	AgentImage string
	// AgentBinary is the build the replication controller brings the
	// running agents to in place (docs/design/upgrades.md): the manager's
	// own executable; nil: never, and a pod runs the template only once
	// it restarted on it (a manager whose executable is no agent, such as
	// a test binary, or --agent-takeover=false).
	AgentBinary *instance.AgentBinary
	// NetworkPolicies makes the service controller keep a NetworkPolicy
	// for every Database that does not turn it off
	// (spec.networkPolicy.enabled); Manager is how it names the manager's
	// pods.
	NetworkPolicies bool
	Manager         resources.ManagerPeer
	// MarkerKey signs the credentials and superuser Secrets the secret
	// controller makes, and verifies those it finds (marker).
	MarkerKey marker.Key
	// AllowPrivilegedRoles lets the roles of spec.roles have SUPERUSER,
	// REPLICATION and BYPASSRLS (--allow-privileged-roles); without it
	// the roles controller refuses them.
	AllowPrivilegedRoles bool
}

// FieldOwner is the field manager of the named controller.
func FieldOwner(controllerName string) string { return "dbkeeper-" + controllerName }

// Outcome is what one sync of a facet observed.
type Outcome struct {
	// Condition is the facet's condition; its type is set by the Reconciler.
	Condition metav1.Condition
	// Status holds the facet's other status fields, if it has any.
	Status *dbv1ac.DatabaseStatusApplyConfiguration
	// RequeueAfter asks for another look after a while, for facets whose
	// truth changes with time alone.
	RequeueAfter time.Duration
}

// Syncer is the part of a facet controller that differs from facet to facet.
type Syncer interface {
	// Sync brings the facet's children in line with the Database and says
	// what it observed. An error that the API server will keep returning
	// until the spec changes should be wrapped with reconcile.TerminalError
	// or be an Invalid error.
	Sync(ctx context.Context, db *dbv1.Database) (Outcome, error)
	// CurrentStatus returns the facet's status fields as the Database
	// holds them now, for the Reconciler to apply again with the condition
	// when Sync does not run (paused, failed): server-side apply removes
	// the fields that their manager stops sending.
	CurrentStatus(db *dbv1.Database) *dbv1ac.DatabaseStatusApplyConfiguration
}

// PauseConsequence is a Syncer that says what a pause means for its facet
// beyond "left as they are" (no failover): the Paused condition says it.
type PauseConsequence interface {
	PausedConsequence() string
}

// Reconciler runs a Syncer for each Database and reports its condition.
type Reconciler struct {
	Client        client.Client
	Writer        *Writer
	ConditionType string
	Syncer        Syncer
	Options       Options
}

// NewReconciler is the Reconciler of a facet from plain dependencies: the
// client that reads the Database, the facet's Writer, its
// condition type, its Syncer and the manager's options.
func NewReconciler(c client.Client, w *Writer, conditionType string, s Syncer, o Options) *Reconciler {
	return &Reconciler{Client: c, Writer: w, ConditionType: conditionType, Syncer: s, Options: o}
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	db := &dbv1.Database{}
	if err := r.Client.Get(ctx, req.NamespacedName, db); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !db.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // the cleanup controller's business
	}
	if r.Options.WaitForFinalizer && !controllerutil.ContainsFinalizer(db, dbv1.Finalizer) {
		return ctrl.Result{}, nil // its arrival is an update that brings us back
	}
	if err := ResolveVolumeRepository(ctx, r.Client, db, backupEnabled(r.Options)); err != nil {
		return ctrl.Result{}, err
	}
	if db.Spec.Paused {
		msg := "spec.paused is true: the children are left as they are"
		if c, ok := r.Syncer.(PauseConsequence); ok {
			msg += "; " + c.PausedConsequence()
		}
		cond := conditions.Unknown(r.ConditionType, dbv1.ReasonPaused, msg)
		return ctrl.Result{}, r.Writer.ApplyCondition(ctx, db, cond, r.Syncer.CurrentStatus(db))
	}

	out, err := r.Syncer.Sync(ctx, db)
	if errors.Is(err, ErrOwnerDeleted) {
		// The cache is behind the deletion: its update brings us back.
		log.FromContext(ctx).V(1).Info("Not writing children: the Database is being deleted", "reason", err.Error())
		return ctrl.Result{}, nil
	}
	if taken := (*NotOursError)(nil); errors.As(err, &taken) {
		// Nothing watches an object somebody else made: look again later,
		// without an error's back-off and log.
		log.FromContext(ctx).Info("Not writing over an object that is not the Database's", "kind", taken.Kind, "name", taken.Name, "why", taken.Why)
		cond := conditions.False(r.ConditionType, dbv1.ReasonNameTaken, err.Error())
		return ctrl.Result{RequeueAfter: nameTakenRecheck}, r.Writer.ApplyCondition(ctx, db, cond, r.Syncer.CurrentStatus(db))
	}
	if err != nil {
		cond := conditions.False(r.ConditionType, dbv1.ReasonApplyFailed, Explain(err))
		if werr := r.Writer.ApplyCondition(ctx, db, cond, r.Syncer.CurrentStatus(db)); werr != nil {
			return ctrl.Result{}, errors.Join(err, werr)
		}
		if Terminal(err) {
			log.FromContext(ctx).Error(err, "Giving up until the Database changes")
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	out.Condition.Type = r.ConditionType
	if err := r.Writer.ApplyCondition(ctx, db, out.Condition, out.Status); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: out.RequeueAfter}, nil
}

// nameTakenRecheck is how often a facet blocked by an object that is not
// its Database's (NotOursError) looks again.
const nameTakenRecheck = 30 * time.Second

// Explain is the message of an error for a condition: when the API server
// refused a child as invalid, it ends by naming the Database fields that set
// the refused fields, because those are what the user can change.
func Explain(err error) string {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return err.Error()
	}
	details := status.Status().Details
	var fields []string
	for _, c := range details.Causes {
		if f := resources.SpecField(details.Kind, c.Field); f != "" && !slices.Contains(fields, f) {
			fields = append(fields, f)
		}
	}
	if len(fields) == 0 {
		return err.Error()
	}
	return fmt.Sprintf("%s; fix %s", err.Error(), strings.Join(fields, ", "))
}

// Terminal reports whether retrying err without a change to the Database is
// pointless: the API server refused the object as invalid.
func Terminal(err error) bool {
	return errors.Is(err, reconcile.TerminalError(nil)) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)
}

// DatabaseChanged lets through the Database events a facet acts on: a new
// generation (spec), a change of annotations, labels or finalizers. Status
// writes by the other controllers do not wake the facets.
func DatabaseChanged() predicate.Predicate {
	return predicate.Or(
		predicate.GenerationChangedPredicate{},
		predicate.AnnotationChangedPredicate{},
		predicate.LabelChangedPredicate{},
		predicate.Funcs{UpdateFunc: func(e eventUpdate) bool {
			return len(e.ObjectOld.GetFinalizers()) != len(e.ObjectNew.GetFinalizers())
		}},
	)
}

// ForDatabase is the builder option that makes a controller react to the
// Database events of DatabaseChanged.
func ForDatabase() builder.ForOption { return builder.WithPredicates(DatabaseChanged()) }

// ControllerOptions are the controller-runtime options of every controller.
func ControllerOptions(o Options) controller.Options {
	return controller.Options{MaxConcurrentReconciles: max(o.MaxConcurrentReconciles, 1)}
}

// AgentsOf is o.Agents, or the agents at the pods' IPs (instance.PodAgents,
// reading their Secrets with SecretReader) without it.
func (o Options) AgentsOf(mgr ctrl.Manager) instance.Agents {
	if o.Agents != nil {
		return o.Agents
	}
	return instance.PodAgents{Secrets: o.SecretReader(mgr)}
}

// SecretReader is o.Secrets, or mgr's API reader without it.
func (o Options) SecretReader(mgr ctrl.Manager) client.Reader {
	if o.Secrets != nil {
		return o.Secrets
	}
	return mgr.GetAPIReader()
}
