package cleanup

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/jobs"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

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
