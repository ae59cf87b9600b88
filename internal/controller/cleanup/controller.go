// Package cleanup is the controller of a Database's deletion. It adds the
// finalizer before any child exists and, when the Database is deleted,
// carries out spec.deletionPolicy before letting it go. It owns the Deleting
// condition, present only while the Database is terminating.
package cleanup

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/jobs"
	"github.com/dbkeeper/dbkeeper/internal/marker"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// Name is the controller's name in --controllers.
const Name = "cleanup"

// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases/status,verbs=get;patch
// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=batch,resources=cronjobs,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;delete

// waitRetry is how often cleanup looks again while it waits for the
// StatefulSet and its pods to go.
const waitRetry = 5 * time.Second

// Controller is the cleanup controller.
type Controller struct{}

// New returns the cleanup controller.
func New() Controller { return Controller{} }

// Name implements controller.Controller.
func (Controller) Name() string { return Name }

// ConditionType implements controller.Controller.
func (Controller) ConditionType() string { return dbv1.ConditionDeleting }

// SetupWithManager implements controller.Controller.
func (c Controller) SetupWithManager(mgr ctrl.Manager, o facet.Options) error {
	r := newReconciler(mgr.GetClient(), facet.NewWriter(mgr, Name).WhileDeleting())
	r.engines = o.Engines
	r.key = o.MarkerKey
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&dbv1.Database{}, facet.ForDatabase()).
		// The final backup Job of spec.backup.beforeDelete.
		Watches(&batchv1.Job{}, handler.EnqueueRequestsFromMapFunc(facet.DatabaseOf(resources.ComponentBackup))).
		// The StatefulSet whose pods must be gone before the data PVCs
		// are deleted; by label, since orphan deletion takes its owner
		// reference.
		Watches(&appsv1.StatefulSet{}, handler.EnqueueRequestsFromMapFunc(facet.DatabaseOf(resources.ComponentDatabase))).
		WithOptions(facet.ControllerOptions(o)).
		Complete(r)
}

// SetupDisabled implements controller.Controller. With cleanup off nobody
// would ever remove the finalizer, so the stand-in removes it from every
// Database: deletion then relies on garbage collection alone, which takes
// the children with owner references (the StatefulSet and its pods, the
// Services, the CronJob, unless the propagation is orphan) and nothing that
// holds data: the data PVCs, the generated Secret and the backup PVC carry
// no owner reference to the Database, whatever the policy.
func (c Controller) SetupDisabled(mgr ctrl.Manager, o facet.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name+"-disabled").
		For(&dbv1.Database{}, facet.ForDatabase()).
		WithOptions(facet.ControllerOptions(o)).
		Complete(newReleaser(mgr.GetClient()))
}

// reconciler adds the finalizer and carries out the deletion policy.
type reconciler struct {
	client client.Client
	writer *facet.Writer
	// engines is the image catalog of the final backup Job; the zero one
	// is the built-in.
	engines engine.Catalog
	// key verifies dbkeeper's mark on the credentials and superuser
	// Secrets (marker): a Secret of their names without it was planted by
	// somebody else, refused by the secret controller, and is not deleted
	// either. The zero key checks nothing.
	key marker.Key
}

// newReconciler is the cleanup reconciler that reads, deletes and patches
// with c, and writes Deleting and status.deletion and creates the final
// backup Job with w.
func newReconciler(c client.Client, w *facet.Writer) *reconciler {
	return &reconciler{client: c, writer: w}
}

// Reconcile implements reconcile.Reconciler.
func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	db := &dbv1.Database{}
	if err := r.client.Get(ctx, req.NamespacedName, db); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	preview, err := r.preview(ctx, db)
	if err != nil {
		return ctrl.Result{}, err
	}
	if db.DeletionTimestamp.IsZero() {
		if err := r.patchFinalizer(ctx, db, controllerutil.AddFinalizer); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.writer.ApplyStatus(ctx, db, preview); err != nil {
			return ctrl.Result{}, fmt.Errorf("applying status.deletion: %w", err)
		}
		return ctrl.Result{}, nil
	}
	if !controllerutil.ContainsFinalizer(db, dbv1.Finalizer) {
		return ctrl.Result{}, nil
	}
	t := dbv1.ConditionDeleting
	if db.Spec.DeletionPolicy == dbv1.DeletionPolicyDoNotDelete {
		cond := conditions.False(t, dbv1.ReasonDeletionBlocked,
			"spec.deletionPolicy is DoNotDelete: the Database stays until you change the policy to Delete, Retain or WipeOut")
		return ctrl.Result{}, r.writer.ApplyCondition(ctx, db, cond, preview)
	}
	if wait, err := r.finalBackup(ctx, db); err != nil || wait != nil {
		if err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.writer.ApplyCondition(ctx, db, *wait, preview)
	}
	plan := planFor(db.Spec.DeletionPolicy)
	cond := conditions.True(t, dbv1.ReasonCleaningUp, fmt.Sprintf("carrying out deletionPolicy %s: %s", db.Spec.DeletionPolicy, plan))
	if err := r.writer.ApplyCondition(ctx, db, cond, preview); err != nil {
		return ctrl.Result{}, err
	}
	waiting, err := r.carryOut(ctx, db, plan)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("carrying out deletionPolicy %s: %w", db.Spec.DeletionPolicy, err)
	}
	if waiting != "" {
		cond := conditions.True(t, dbv1.ReasonCleaningUp, fmt.Sprintf("carrying out deletionPolicy %s: waiting for %s to go before deleting the volumes it uses",
			db.Spec.DeletionPolicy, waiting))
		// The StatefulSet's deletion brings us back; the requeue is for a
		// missed event only.
		return ctrl.Result{RequeueAfter: waitRetry}, r.writer.ApplyCondition(ctx, db, cond, preview)
	}
	log.FromContext(ctx).Info("Removing finalizer", "deletionPolicy", db.Spec.DeletionPolicy)
	return ctrl.Result{}, r.patchFinalizer(ctx, db, controllerutil.RemoveFinalizer)
}

// finalBackup runs the final backup of spec.backup.beforeDelete and returns
// the Deleting condition to report while it has not succeeded, or nil once
// it has (or when none is asked for: WipeOut deletes the backups anyway).
func (r *reconciler) finalBackup(ctx context.Context, db *dbv1.Database) (*metav1.Condition, error) {
	if !db.Spec.Backup.BeforeDelete || db.Spec.DeletionPolicy == dbv1.DeletionPolicyWipeOut {
		return nil, nil
	}
	name := resources.FinalBackupJobName(db)
	t := dbv1.ConditionDeleting
	eng, err := r.engines.For(db.Spec.Engine)
	if err != nil {
		return nil, fmt.Errorf("running the final backup: %w", err)
	}
	state, err := facet.TLSState(ctx, r.client, db)
	if err != nil {
		return nil, err
	}
	desired, err := resources.FinalBackupJob(db, eng, state.On())
	if err != nil {
		return nil, fmt.Errorf("building final backup Job %s: %w", name, err)
	}
	job, created, err := jobs.Ensure(ctx, r.client, r.writer, desired)
	if err != nil {
		return nil, err
	}
	if created {
		log.FromContext(ctx).Info("Starting final backup before deletion", "Job", klog.KRef(db.Namespace, name))
		cond := conditions.True(t, dbv1.ReasonCleaningUp, fmt.Sprintf("spec.backup.beforeDelete: started final backup Job %s; nothing is deleted until it succeeds", name))
		return &cond, nil
	}
	done, failed, _, msg := jobs.Finished(job)
	switch {
	case !done:
		cond := conditions.True(t, dbv1.ReasonCleaningUp, fmt.Sprintf("spec.backup.beforeDelete: waiting for final backup Job %s", name))
		return &cond, nil
	case failed:
		cond := conditions.False(t, dbv1.ReasonFinalBackupFailed, fmt.Sprintf(
			"final backup Job %s failed (%s): nothing is deleted; delete the Job to retry, or set spec.backup.beforeDelete to false", name, msg))
		return &cond, nil
	}
	return nil, nil
}

// preview is status.deletion: what deleting the Database would remove and
// keep under its current policy. The data PVCs are those that exist and
// those the StatefulSet will create for spec.replicas.
func (r *reconciler) preview(ctx context.Context, db *dbv1.Database) (*dbv1ac.DatabaseStatusApplyConfiguration, error) {
	data := &corev1.PersistentVolumeClaimList{}
	if err := r.list(ctx, db, resources.ComponentDatabase, data); err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, pvc := range data.Items {
		if isDataPVC(db, &pvc) {
			names[pvc.Name] = true
		}
	}
	for i := range resources.Instances(db) {
		names[resources.DataPVCName(db, int(i))] = true
	}
	p := planFor(db.Spec.DeletionPolicy)
	d := dbv1ac.DeletionStatus().WithPolicy(db.Spec.DeletionPolicy)
	if db.Spec.DeletionPolicy == dbv1.DeletionPolicyDoNotDelete {
		d.WithBlocked(true)
		p = plan{}
	}
	add := func(del bool, what string) {
		if del {
			d.WithDeletes(what)
		} else {
			d.WithKeeps(what)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(names)) {
		add(p.deleteData, "PersistentVolumeClaim/"+n)
	}
	if resources.UserSecret(db) {
		d.WithKeeps("Secret/" + resources.CredentialsSecretName(db))
	} else {
		add(p.deleteSecret, "Secret/"+resources.GeneratedSecretName(db))
	}
	add(p.deleteSecret, "Secret/"+resources.SuperuserSecretName(db))
	add(p.deleteBackup, "PersistentVolumeClaim/"+resources.BackupName(db))
	return dbv1ac.DatabaseStatus().WithDeletion(d), nil
}

// plan says, for each kind of kept data, whether a policy deletes it.
type plan struct {
	deleteData, deleteSecret, deleteBackup bool
}

func planFor(p dbv1.DeletionPolicy) plan {
	switch p {
	case dbv1.DeletionPolicyRetain:
		return plan{}
	case dbv1.DeletionPolicyWipeOut:
		return plan{deleteData: true, deleteSecret: true, deleteBackup: true}
	}
	return plan{deleteData: true, deleteSecret: true}
}

func (p plan) String() string {
	word := func(del bool) string {
		if del {
			return "delete"
		}
		return "keep"
	}
	return fmt.Sprintf("%s the data PVCs, %s the generated credentials and superuser Secrets, %s the backup PVC",
		word(p.deleteData), word(p.deleteSecret), word(p.deleteBackup))
}

// carryOut deletes what the plan deletes and takes the owner reference off
// what it keeps, so that garbage collection cannot take it either. It
// touches only the children this Database made: their exact names, checked
// with Belongs (labels, owner UID), never whatever carries the labels.
// Every step treats "already gone" as done. It returns what it waits for,
// if anything: before deleting volumes, the workload that runs on them
// (which orphan deletion would otherwise leave running) must be gone.
func (r *reconciler) carryOut(ctx context.Context, db *dbv1.Database, p plan) (string, error) {
	if p.deleteData || p.deleteBackup {
		waiting, err := r.deleteWorkload(ctx, db)
		if err != nil || waiting != "" {
			return waiting, err
		}
	}
	data := &corev1.PersistentVolumeClaimList{}
	if err := r.list(ctx, db, resources.ComponentDatabase, data); err != nil {
		return "", err
	}
	for i := range data.Items {
		if !isDataPVC(db, &data.Items[i]) {
			continue
		}
		if err := r.deleteOrKeep(ctx, db, &data.Items[i], p.deleteData); err != nil {
			return "", err
		}
	}
	if err := r.deleteOrKeepNamed(ctx, db, &corev1.PersistentVolumeClaim{}, resources.BackupName(db), p.deleteBackup); err != nil {
		return "", err
	}
	// The superuser Secret follows the credentials Secret's row of the
	// policy, also beside a user's Secret: kept data needs its superuser.
	secrets := []string{resources.SuperuserSecretName(db)}
	if !resources.UserSecret(db) { // the user's Secret is never touched
		secrets = append(secrets, resources.GeneratedSecretName(db))
	}
	for _, name := range secrets {
		secret := &metav1.PartialObjectMetadata{}
		secret.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		del := p.deleteSecret
		if del {
			made, err := r.madeByDBKeeper(ctx, db, name)
			if err != nil {
				return "", err
			}
			del = made
		}
		if err := r.deleteOrKeepNamed(ctx, db, secret, name, del); err != nil {
			return "", err
		}
	}
	return "", nil
}

// madeByDBKeeper reports whether Secret name of db's namespace carries
// dbkeeper's mark (or does not exist, or no key checks marks): the only
// credentials and superuser Secrets a deletion policy deletes.
func (r *reconciler) madeByDBKeeper(ctx context.Context, db *dbv1.Database, name string) (bool, error) {
	if len(r.key) == 0 {
		return true, nil
	}
	sec, err := apply.Live(ctx, r.client, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.Secret{})
	if err != nil {
		return false, fmt.Errorf("getting Secret %s: %w", name, err)
	}
	if sec == nil || r.key.Verify(sec, engine.PasswordKey) {
		return true, nil
	}
	log.FromContext(ctx).Info("Leaving a Secret dbkeeper did not make (it lacks dbkeeper's mark)", "Secret", klog.KObj(sec))
	return false, nil
}

// deleteWorkload deletes what runs on the volumes a policy deletes: the
// StatefulSet (in the foreground, so that it stays until its pods are
// gone), the Services, the backup CronJob and the Jobs dbkeeper ran for the
// Database. Garbage collection would take them after the Database, but not
// under orphan deletion, which leaves them without an owner reference:
// running, and failing, on deleted volumes forever. It returns the
// StatefulSet's name while it (and so its pods) is still there.
func (r *reconciler) deleteWorkload(ctx context.Context, db *dbv1.Database) (string, error) {
	for _, child := range []struct {
		obj  client.Object
		name string
	}{
		{&corev1.Service{}, resources.ClientServiceName(db)},
		{&corev1.Service{}, resources.ReadOnlyServiceName(db)},
		{&corev1.Service{}, resources.HeadlessServiceName(db)},
		{&batchv1.CronJob{}, resources.BackupName(db)},
		{&policyv1.PodDisruptionBudget{}, resources.PodDisruptionBudgetName(db)},
		// the primary Lease and what lets the agents hold it
		{&coordinationv1.Lease{}, resources.LeaseName(db)},
		{&rbacv1.RoleBinding{}, resources.InstanceRoleName(db)},
		{&rbacv1.Role{}, resources.InstanceRoleName(db)},
		{&corev1.ServiceAccount{}, resources.InstanceServiceAccountName(db)},
	} {
		if err := r.deleteOrKeepNamed(ctx, db, child.obj, child.name, true); err != nil {
			return "", err
		}
	}
	jobs := &batchv1.JobList{}
	if err := r.list(ctx, db, resources.ComponentBackup, jobs); err != nil {
		return "", err
	}
	for i := range jobs.Items {
		// Not the final backup Job: finalBackup looks for it on every
		// reconcile, and would run it again; it has an owner reference
		// and has finished.
		job := &jobs.Items[i]
		if job.Name != resources.FinalBackupJobName(db) && resources.IsJobName(db, job.Name) && resources.Belongs(db, job) {
			if err := r.deleteOrKeep(ctx, db, job, true); err != nil {
				return "", err
			}
		}
	}
	name := resources.StatefulSetName(db)
	sts, err := apply.Live(ctx, r.client, client.ObjectKey{Namespace: db.Namespace, Name: name}, &appsv1.StatefulSet{})
	if err != nil {
		return "", fmt.Errorf("getting StatefulSet %s: %w", name, err)
	}
	if sts == nil || !resources.Belongs(db, sts) {
		return "", nil
	}
	if sts.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(sts, metav1.FinalizerDeleteDependents) {
		log.FromContext(ctx).Info("Deleting StatefulSet and its pods by deletion policy", "StatefulSet", klog.KObj(sts), "deletionPolicy", db.Spec.DeletionPolicy)
		err := r.client.Delete(ctx, sts, client.Preconditions{UID: ptr.To(sts.UID)}, client.PropagationPolicy(metav1.DeletePropagationForeground))
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return "", nil
		}
		if err != nil {
			return "", fmt.Errorf("deleting StatefulSet %s: %w", name, err)
		}
	}
	return "StatefulSet " + name + " and its pods", nil
}

// isDataPVC reports whether pvc is one of the Database's data volumes.
func isDataPVC(db *dbv1.Database, pvc *corev1.PersistentVolumeClaim) bool {
	return resources.IsDataPVCName(db, pvc.Name) && resources.Belongs(db, pvc)
}

func (r *reconciler) list(ctx context.Context, db *dbv1.Database, component string, list client.ObjectList) error {
	sel := labels.SelectorFromSet(resources.Labels(db, component))
	if err := r.client.List(ctx, list, client.InNamespace(db.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return fmt.Errorf("listing %s objects: %w", component, err)
	}
	return nil
}

// deleteOrKeepNamed is deleteOrKeep for the child of that exact name, when
// it exists and belongs to db.
func (r *reconciler) deleteOrKeepNamed(ctx context.Context, db *dbv1.Database, obj client.Object, name string, del bool) error {
	obj, err := apply.Live(ctx, r.client, client.ObjectKey{Namespace: db.Namespace, Name: name}, obj)
	if err != nil {
		return fmt.Errorf("getting %s: %w", name, err)
	}
	if obj == nil {
		return nil
	}
	if !resources.Belongs(db, obj) {
		log.FromContext(ctx).V(1).Info("Leaving an object that is not this Database's", facet.Kind(r.client, obj), klog.KObj(obj))
		return nil
	}
	return r.deleteOrKeep(ctx, db, obj, del)
}

func (r *reconciler) deleteOrKeep(ctx context.Context, db *dbv1.Database, obj client.Object, del bool) error {
	if del {
		if !obj.GetDeletionTimestamp().IsZero() {
			return nil
		}
		log.FromContext(ctx).Info("Deleting by deletion policy", facet.Kind(r.client, obj), klog.KObj(obj), "deletionPolicy", db.Spec.DeletionPolicy)
		err := r.client.Delete(ctx, obj, client.Preconditions{UID: ptr.To(obj.GetUID())}, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting %s: %w", obj.GetName(), err)
		}
		return nil
	}
	// Kept: Disown logs the owner reference it removes, if any.
	_, err := facet.Disown(ctx, r.client, db, obj)
	return err
}

func (r *reconciler) patchFinalizer(ctx context.Context, db *dbv1.Database, change func(client.Object, string) bool) error {
	before := db.DeepCopy()
	if !change(db, dbv1.Finalizer) {
		return nil
	}
	if err := r.client.Patch(ctx, db, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("patching finalizers: %w", err))
	}
	return nil
}

// releaser removes the finalizer when the cleanup controller is disabled.
type releaser struct {
	client client.Client
}

// newReleaser is the releaser that patches with c.
func newReleaser(c client.Client) *releaser { return &releaser{client: c} }

// Reconcile implements reconcile.Reconciler.
func (r *releaser) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	db := &dbv1.Database{}
	if err := r.client.Get(ctx, req.NamespacedName, db); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := db.DeepCopy()
	if !controllerutil.RemoveFinalizer(db, dbv1.Finalizer) {
		return ctrl.Result{}, nil
	}
	log.FromContext(ctx).Info("Removing finalizer: the cleanup controller is disabled")
	if err := r.client.Patch(ctx, db, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("removing finalizer: %w", err))
	}
	return ctrl.Result{}, nil
}
