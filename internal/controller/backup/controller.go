// Package backup is the controller of a Database's backups: the backup PVC,
// the CronJob that dumps into it, and the truth about the last backups, read
// from the Jobs. It owns the BackupReady condition and status.backup.
package backup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/jobs"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// Name is the controller's name in --controllers.
const Name = "backup"

// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases,verbs=get;list;watch
// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases/status,verbs=get;patch
// +kubebuilder:rbac:groups=batch,resources=cronjobs,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Controller is the backup controller.
type Controller struct{}

// New returns the backup controller.
func New() Controller { return Controller{} }

// Name implements controller.Controller.
func (Controller) Name() string { return Name }

// ConditionType implements controller.Controller.
func (Controller) ConditionType() string { return dbv1.ConditionBackupReady }

// SetupWithManager implements controller.Controller.
func (c Controller) SetupWithManager(mgr ctrl.Manager, o facet.Options) error {
	registerMetrics(mgr.GetCache())
	w := facet.NewWriter(mgr, Name)
	s := newSyncer(mgr.GetClient(), w, time.Now)
	s.engines = o.Engines
	s.agents = o.AgentsOf(mgr)
	s.agentImage = o.AgentImage
	s.reader = mgr.GetAPIReader()
	r := facet.NewReconciler(mgr.GetClient(), w, c.ConditionType(), s, o)
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&dbv1.Database{}, facet.ForDatabase()).
		Owns(&batchv1.CronJob{}).
		// The backup PVC has no owner reference (the Delete and Retain
		// policies keep it): find its Database by the instance label.
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(facet.DatabaseOf(resources.ComponentBackup))).
		// Backup Jobs belong to the CronJob, not to the Database: find the
		// Database by the instance label the job template gives them, as
		// for the verification Job.
		Watches(&batchv1.Job{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
			return append(facet.DatabaseOf(resources.ComponentBackup)(ctx, obj), facet.DatabaseOf(resources.ComponentVerification)(ctx, obj)...)
		})).
		WithOptions(facet.ControllerOptions(o)).
		Complete(r)
}

// SetupDisabled implements controller.Controller.
func (c Controller) SetupDisabled(mgr ctrl.Manager, o facet.Options) error {
	return facet.SetupDisabled(mgr, Name, c.ConditionType(), o)
}

// syncer keeps the backup PVC, the CronJob and the on-demand and restore
// Jobs, and reads the backup history off the Jobs.
type syncer struct {
	client client.Client
	writer *facet.Writer
	now    func() time.Time
	// engines is the image catalog; the zero one is the built-in.
	engines engine.Catalog
	// agents reaches the instances' agents: a Database with an object
	// store archives through them (syncArchive).
	agents instance.Agents
	// reader reads what the cache does not hold: a recovery's source
	// Database in another namespace.
	reader client.Reader
	// agentImage is the image the verification pod copies the agent from
	// (facet.Options.AgentImage).
	agentImage string
}

// newSyncer is the backup syncer that reads and patches with c, applies
// with w, and judges the age of backups by the clock now.
func newSyncer(c client.Client, w *facet.Writer, now func() time.Time) *syncer {
	return &syncer{client: c, reader: c, writer: w, now: now}
}

func (s *syncer) Sync(ctx context.Context, db *dbv1.Database) (facet.Outcome, error) {
	eng, err := s.engines.For(db.Spec.Engine)
	if err != nil {
		return facet.Outcome{}, reconcile.TerminalError(err)
	}
	if err := s.applyPVC(ctx, db); err != nil {
		return facet.Outcome{}, err
	}
	state, err := facet.TLSState(ctx, s.client, db)
	if err != nil {
		return facet.Outcome{}, err
	}
	tls := state.On()
	desired, err := resources.BackupCronJob(db, eng, tls)
	if err != nil {
		return facet.Outcome{}, reconcile.TerminalError(err)
	}
	cron := &batchv1.CronJob{}
	if err := s.apply(ctx, db, cron, desired, "CronJob"); err != nil {
		return facet.Outcome{}, err
	}

	store := resources.Store(db, tls)
	if err := s.syncVolumeRepository(ctx, db, eng, resources.IsVolumeStore(db, store)); err != nil {
		return facet.Outcome{}, err
	}
	if store != nil {
		// base backups and the WAL archive in the repository; the CronJob
		// above stays suspended, its dumps kept.
		restoring, restoredFrom, err := s.bootstrap(ctx, db, eng, tls)
		if err != nil {
			return facet.Outcome{}, err
		}
		return s.syncArchive(ctx, db, eng, tls, store, restoring, restoredFrom)
	}

	token, err := s.runOnDemand(ctx, db, eng, tls)
	if err != nil {
		return facet.Outcome{}, err
	}

	restoring, restoredFrom, err := s.bootstrap(ctx, db, eng, tls)
	if err != nil {
		return facet.Outcome{}, err
	}

	list := &batchv1.JobList{}
	sel := labels.SelectorFromSet(resources.Labels(db, resources.ComponentBackup))
	if err := s.client.List(ctx, list, client.InNamespace(db.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return facet.Outcome{}, fmt.Errorf("listing backup Jobs: %w", err)
	}
	// The pods say why a running Job's container cannot start and why a
	// failed Job failed; with every Job complete they say nothing.
	pods := &corev1.PodList{}
	if slices.ContainsFunc(list.Items, func(j batchv1.Job) bool { done, failed, _, _ := jobs.Finished(&j); return !done || failed }) {
		if err := s.client.List(ctx, pods, client.InNamespace(db.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return facet.Outcome{}, fmt.Errorf("listing backup pods: %w", err)
		}
	}
	stuck, running := podNotStarting(db, list.Items, pods.Items)
	backups := slices.DeleteFunc(list.Items, func(j batchv1.Job) bool { return j.Name == resources.RestoreJobName(db) })
	history := Merge(Observe(cron, backups, pods.Items), db.Status.Backup)
	history.OnDemandToken, history.RestoredFrom = token, restoredFrom
	cond, after := Assess(db, history, s.now())
	if restoring != nil {
		// the Job's changes wake the controller; a source's consent does
		// not
		cond, after = *restoring, restoringRecheck
	}
	if stuck != nil {
		cond = *stuck
	}
	if running {
		after = sooner(after, runningJobRecheck)
	}
	return facet.Outcome{Condition: cond, Status: statusOf(history), RequeueAfter: after}, nil
}

// restoringRecheck is how often the controller looks at a restore in
// progress besides its Job's changes.
const restoringRecheck = 10 * time.Second

// bootstrap runs spec.bootstrap's restore Job until it has succeeded once,
// and returns the condition to report meanwhile (nil once restored, see
// RestoreProgress) and status.backup.restoredFrom. The Job is only made
// while the source consents (facet.DumpSourceRefused); a refusal is
// looked at again every restoringRecheck (the source's annotation wakes
// nothing here). A failed restore is reported, not retried: delete the
// Job to try again. Without restoredFrom (a Database re-created without
// its status) the Job runs again; the restore command finds its mark in
// the data and touches nothing.
func (s *syncer) bootstrap(ctx context.Context, db *dbv1.Database, eng engine.Engine, tls resources.ServerTLS) (*metav1.Condition, string, error) {
	if db.Spec.Bootstrap == nil || db.Spec.Bootstrap.FromBackup == nil {
		return nil, "", nil
	}
	if db.Status.Backup != nil && db.Status.Backup.RestoredFrom != "" {
		return nil, db.Status.Backup.RestoredFrom, nil
	}
	from := db.Spec.Bootstrap.FromBackup
	source := from.Database + "/" + cmp.Or(from.File, "latest")
	name := resources.RestoreJobName(db)
	desired, err := resources.RestoreJob(db, eng, tls)
	if err != nil {
		return nil, "", reconcile.TerminalError(err)
	}
	live, err := apply.Live(ctx, s.client, client.ObjectKey{Namespace: db.Namespace, Name: name}, &batchv1.Job{})
	if err != nil {
		return nil, "", fmt.Errorf("getting Job %s: %w", name, err)
	}
	if live == nil {
		// a consent withdrawn after the Job started does not stop it
		var refused *resources.RecoveryRefusedError
		if err := facet.DumpSourceRefused(ctx, s.reader, db); errors.As(err, &refused) {
			cond := conditions.False(dbv1.ConditionBackupReady, dbv1.ReasonRecoveryRefused, refused.Error())
			return &cond, "", nil
		} else if err != nil {
			return nil, "", err
		}
	}
	job, created, err := jobs.Ensure(ctx, s.client, s.writer, desired)
	if err != nil {
		return nil, "", err
	}
	if created {
		log.FromContext(ctx).Info("Starting restore", "Job", klog.KRef(db.Namespace, name), "from", source)
	}
	if cond := RestoreProgress(db, job, source); cond != nil {
		return cond, "", nil
	}
	log.FromContext(ctx).Info("Restore finished", "Job", klog.KRef(db.Namespace, name), "from", source)
	return nil, source, nil
}

// runOnDemand starts the backup Job of the backup-now annotation's token
// unless that token already ran, and returns the token that last ran. The
// Job's name comes from the token, so a token whose status write was lost
// finds its Job instead of starting a second one.
func (s *syncer) runOnDemand(ctx context.Context, db *dbv1.Database, eng engine.Engine, tls resources.ServerTLS) (string, error) {
	last := ""
	if db.Status.Backup != nil {
		last = db.Status.Backup.LastOnDemandToken
	}
	token := db.Annotations[dbv1.AnnotationBackupNow]
	if token == "" || token == last {
		return last, nil
	}
	job, err := resources.OnDemandBackupJob(db, eng, tls, token)
	if err != nil {
		return "", reconcile.TerminalError(err)
	}
	_, created, err := jobs.Ensure(ctx, s.client, s.writer, job)
	if err != nil {
		return "", err
	}
	if created {
		log.FromContext(ctx).Info("Starting on-demand backup", "Job", klog.KRef(db.Namespace, *job.GetName()), "token", token)
	}
	return token, nil
}

// applyPVC applies the backup PVC, keeping the size of a live one that is
// larger than the spec asks for.
func (s *syncer) applyPVC(ctx context.Context, db *dbv1.Database) error {
	desired := resources.BackupPVC(db)
	live, err := apply.Live(ctx, s.client, client.ObjectKey{Namespace: db.Namespace, Name: *desired.GetName()}, &corev1.PersistentVolumeClaim{})
	if err != nil {
		return fmt.Errorf("getting backup PVC %s: %w", *desired.GetName(), err)
	}
	if live != nil {
		// Earlier versions gave it an owner reference, with which garbage
		// collection could take it before the cleanup finalizer runs. A
		// conflict: the PVC changed since the cache saw it, and that change
		// brings us back.
		if _, err := facet.Disown(ctx, s.client, db, live); err != nil && !apierrors.IsConflict(err) {
			return err
		}
		resources.KeepLargerRequest(desired, live)
	}
	return s.write(ctx, live, desired, "PVC")
}

// apply reads the live object of desired's name into obj and applies
// desired over it.
func (s *syncer) apply(ctx context.Context, db *dbv1.Database, obj client.Object, desired namedApplyConfiguration, kind string) error {
	name := *desired.GetName()
	live, err := apply.Live(ctx, s.client, client.ObjectKey{Namespace: db.Namespace, Name: name}, obj)
	if err != nil {
		return fmt.Errorf("getting backup %s %s: %w", kind, name, err)
	}
	return s.write(ctx, live, desired, kind)
}

// write applies desired over live, which is nil when there is none.
func (s *syncer) write(ctx context.Context, live client.Object, desired namedApplyConfiguration, kind string) error {
	if _, err := s.writer.Apply(ctx, live, desired); err != nil {
		return fmt.Errorf("applying backup %s %s: %w", kind, *desired.GetName(), err)
	}
	return nil
}

func (s *syncer) CurrentStatus(db *dbv1.Database) *dbv1ac.DatabaseStatusApplyConfiguration {
	if db.Status.Backup == nil {
		return nil
	}
	if db.Spec.Backup.ObjectStore != nil || db.Spec.Backup.VolumeRepository == dbv1.VolumeRepositoryEnabled || db.Status.Backup.RepositoryPath != "" {
		return dbv1ac.DatabaseStatus().WithBackup(backupStatusApply(db.Status.Backup))
	}
	b := db.Status.Backup
	return statusOf(History{
		LastSchedule: b.LastScheduleTime, LastSuccess: b.LastSuccessfulTime, LastFailure: b.LastFailedTime,
		LastJob: b.LastJob, LastFailedJob: b.LastFailedJob, LastFailureMessage: b.LastFailureMessage,
		OnDemandToken: b.LastOnDemandToken, RestoredFrom: b.RestoredFrom,
	})
}
