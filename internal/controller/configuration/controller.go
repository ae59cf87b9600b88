package configuration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// Name is the controller's name in --controllers.
const Name = "configuration"

// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases,verbs=get;list;watch
// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// How soon the parameters are sent again: while an instance did not
// answer or a restart is pending, and when all is applied (which repairs
// a parameter changed by hand with ALTER SYSTEM).
const (
	retryAfter  = 10 * time.Second
	resyncAfter = 5 * time.Minute
)

// Controller is the configuration controller.
type Controller struct{}

// New returns the configuration controller.
func New() Controller { return Controller{} }

// Name implements controller.Controller.
func (Controller) Name() string { return Name }

// ConditionType implements controller.Controller.
func (Controller) ConditionType() string { return dbv1.ConditionConfigurationReady }

// SetupWithManager implements controller.Controller.
func (c Controller) SetupWithManager(mgr ctrl.Manager, o facet.Options) error {
	w := facet.NewWriter(mgr, Name)
	r := facet.NewReconciler(mgr.GetClient(), w, c.ConditionType(), &syncer{client: mgr.GetClient(), agents: o.AgentsOf(mgr), writer: w}, o)
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&dbv1.Database{}, facet.ForDatabase()).
		// an instance that starts (or restarts) gets the parameters
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(facet.DatabaseOf(resources.ComponentDatabase)),
			builder.WithPredicates(readinessChanged())).
		WithOptions(facet.ControllerOptions(o)).
		Complete(r)
}

// SetupDisabled implements controller.Controller.
func (c Controller) SetupDisabled(mgr ctrl.Manager, o facet.Options) error {
	return facet.SetupDisabled(mgr, Name, c.ConditionType(), o)
}

// readinessChanged lets through the pod events that make an instance
// start or stop running: creation, deletion and a change of Ready.
func readinessChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*corev1.Pod)
		n, ok2 := e.ObjectNew.(*corev1.Pod)
		return !ok1 || !ok2 || running(o) != running(n) || !equality.Semantic.DeepEqual(o.Status.ContainerStatuses, n.Status.ContainerStatuses)
	}}
}

// Agents is what the controller asks of the instances' agents.
type Agents interface {
	Parameters(ctx context.Context, db *dbv1.Database, pod *corev1.Pod, req agentapi.ParametersRequest) (agentapi.ParametersResponse, error)
	Restart(ctx context.Context, db *dbv1.Database, pod *corev1.Pod) (agentapi.Status, error)
}

// Event reasons of the controller.
const (
	// ReasonRestartedInPlace: an instance whose pod runs the current
	// template still waited for a restart (a lowered standby-floor
	// setting), and its agent restarted the server in place.
	ReasonRestartedInPlace = "RestartedInPlace"
)

// syncer sends a Database's parameters to its running instances.
type syncer struct {
	client client.Client
	agents Agents
	writer *facet.Writer
	// mu guards restarted: by pod UID, the pending parameters the pod
	// was restarted in place for (it is not restarted again for them).
	mu        sync.Mutex
	restarted map[string]string
}

// Sync implements facet.Syncer.
func (s *syncer) Sync(ctx context.Context, db *dbv1.Database) (facet.Outcome, error) {
	pods := &corev1.PodList{}
	if err := s.client.List(ctx, pods, client.InNamespace(db.Namespace), client.MatchingLabels(resources.PodSelectorLabels(db))); err != nil {
		return facet.Outcome{}, err
	}
	spec := parameters(db)
	req := agentapi.ParametersRequest{Parameters: spec}
	var up []*corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; running(p) {
			up = append(up, p)
		}
	}
	slices.SortFunc(up, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	// at once: one frozen instance delays the others by nothing
	answers := make([]answer, len(up))
	var wg sync.WaitGroup
	for i, pod := range up {
		wg.Go(func() {
			res, err := s.agents.Parameters(ctx, db, pod, req)
			answers[i] = answer{pod: pod.Name, res: res, err: err}
		})
	}
	wg.Wait()
	previous := ""
	if db.Status.Configuration != nil {
		previous = db.Status.Configuration.RestartRevision
	}
	v := judge(spec, int(resources.Instances(db)), answers, previous)
	if v.revision != previous {
		log.FromContext(ctx).Info("Restart-only parameters written on every instance: the pods restart in the usual order", "restartRevision", v.revision, "previous", previous)
	}
	out := facet.Outcome{Condition: v.condition, Status: statusOf(v), RequeueAfter: resyncAfter}
	if v.condition.Status != "True" || len(v.pending) > 0 {
		out.RequeueAfter = retryAfter
	}
	if len(v.pending) > 0 && v.condition.Status == "True" {
		if err := s.restartInPlace(ctx, db, up, answers, v); err != nil {
			return facet.Outcome{}, err
		}
	}
	return out, nil
}

// restartInPlace restarts the instance inPlace chooses, once for its
// pending parameters.
func (s *syncer) restartInPlace(ctx context.Context, db *dbv1.Database, pods []*corev1.Pod, answers []answer, v verdict) error {
	s.mu.Lock()
	if s.restarted == nil {
		s.restarted = map[string]string{}
	}
	pod, pending := inPlace(db, pods, answers, int(resources.Instances(db)), v.revision, s.restarted)
	if pod != nil {
		s.restarted[string(pod.UID)] = key(pending)
	}
	s.mu.Unlock()
	if pod == nil {
		return nil
	}
	log.FromContext(ctx).Info("Restarting the server in place: its pod runs the current template and it still waits for a restart", "pod", pod.Name, "pending", pending)
	if _, err := s.agents.Restart(ctx, db, pod); err != nil {
		return fmt.Errorf("restarting the server of %s in place for %s: %w", pod.Name, strings.Join(pending, ", "), err)
	}
	if s.writer != nil {
		s.writer.Eventf(db, pod, corev1.EventTypeNormal, ReasonRestartedInPlace, "Restart",
			"Restarted the server of %s in place for %s (its pod runs the current template)", pod.Name, strings.Join(pending, ", "))
	}
	return nil
}

// CurrentStatus implements facet.Syncer.
func (s *syncer) CurrentStatus(db *dbv1.Database) *dbv1ac.DatabaseStatusApplyConfiguration {
	c := db.Status.Configuration
	if c == nil {
		return nil
	}
	return statusOf(verdict{pending: c.PendingRestart, revision: c.RestartRevision})
}

// statusOf is status.configuration of a verdict.
func statusOf(v verdict) *dbv1ac.DatabaseStatusApplyConfiguration {
	if len(v.pending) == 0 && v.revision == "" {
		return nil
	}
	c := dbv1ac.ConfigurationStatus().WithPendingRestart(v.pending...)
	if v.revision != "" {
		c.WithRestartRevision(v.revision)
	}
	return dbv1ac.DatabaseStatus().WithConfiguration(c)
}

// parameters is spec.postgresql.parameters as the agents take them, with
// shared_preload_libraries when an extension of spec.postgresql.extensions
// needs its library there.
func parameters(db *dbv1.Database) map[string]string {
	out := make(map[string]string, len(db.Spec.PostgreSQL.Parameters)+1)
	for _, k := range slices.Sorted(maps.Keys(db.Spec.PostgreSQL.Parameters)) {
		out[k] = string(db.Spec.PostgreSQL.Parameters[k])
	}
	if libs := preloadLibraries(db); len(libs) > 0 {
		out[preloadParameter] = strings.Join(libs, ",")
	}
	return out
}

// preloadParameter is the parameter spec.postgresql.extensions sets.
const preloadParameter = "shared_preload_libraries"

// preloadLibraries are the libraries of spec.postgresql.extensions that
// must be in shared_preload_libraries, sorted: those of every entry, also
// an Absent one (the library stays loaded while its extension may still
// exist; the entry leaves the list once it was dropped).
func preloadLibraries(db *dbv1.Database) []string {
	var libs []string
	for _, e := range db.Spec.PostgreSQL.Extensions {
		if lib, ok := dbv1.PreloadLibraries[e.Name]; ok && !slices.Contains(libs, lib) {
			libs = append(libs, lib)
		}
	}
	slices.Sort(libs)
	return libs
}

// running says whether a pod's instance runs: Ready, not terminating, with
// an IP.
func running(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
