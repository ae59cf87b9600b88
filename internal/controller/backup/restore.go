package backup

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/jobs"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// RestoreProgress is BackupReady while spec.bootstrap's restore Job, of
// the dump source ("<database>/<file>"), has not succeeded: Restoring while
// it runs, RestoreRefused when its pod failure policy failed it (the
// restore command found data it did not put there and touched nothing),
// RestoreFailed when it failed otherwise. It is nil once the Job succeeded.
func RestoreProgress(db *dbv1.Database, job *batchv1.Job, source string) *metav1.Condition {
	t := dbv1.ConditionBackupReady
	name := resources.RestoreJobName(db)
	done, failed, _, msg := jobs.Finished(job)
	var cond metav1.Condition
	switch {
	case !done:
		cond = conditions.False(t, dbv1.ReasonRestoring, fmt.Sprintf("restoring %s with Job %s", source, name))
	case failed && refused(job):
		data := resources.DataPVCName(db, 0)
		cond = conditions.False(t, dbv1.ReasonRestoreRefused, fmt.Sprintf(
			"restore Job %s refused to restore %s: the database on volume %s already holds data that no restore put there, "+
				"so nothing was touched and the client Service stays closed (kubectl logs job/%s lists what it found). "+
				"To keep that data, re-create the Database without spec.bootstrap; to restore instead, delete the Database and the PVC %s "+
				"(its data is lost) and create it again",
			name, source, data, name, data))
	case failed:
		cond = conditions.False(t, dbv1.ReasonRestoreFailed, fmt.Sprintf(
			"restore Job %s of %s failed (%s): check the dump name and the backup volume %s-backup, then delete the Job to retry",
			name, source, msg, db.Spec.Bootstrap.FromBackup.Database))
	default:
		return nil
	}
	return &cond
}

// refused reports whether the Job failed by its pod failure policy, whose
// only FailJob rule is the restore command's refusal exit code.
func refused(job *batchv1.Job) bool {
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			return c.Reason == batchv1.JobReasonPodFailurePolicy
		}
	}
	return false
}
