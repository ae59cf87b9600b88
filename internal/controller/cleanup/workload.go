package cleanup

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

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
		{&policyv1.PodDisruptionBudget{}, resources.PrimaryDisruptionBudgetName(db)},
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
