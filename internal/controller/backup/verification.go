package backup

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/jobs"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// jobNameLabel is the label the Job controller gives a Job's pods.
const jobNameLabel = "batch.kubernetes.io/job-name"

// VerificationDue says whether a verification restore is due for db at
// now, given the status so far: a new backup-verify-now token's, else a
// scheduled one (spec.backup.verification, unless suspended), and its ID.
// next is when the schedule is due next (zero when it is not running). An
// unparsable schedule is an error naming the field.
func VerificationDue(db *dbv1.Database, st *dbv1.BackupStatus, now time.Time) (id string, due bool, next time.Time, err error) {
	if token := db.Annotations[dbv1.AnnotationBackupVerifyNow]; token != "" && token != st.LastVerifyToken {
		return "on-demand-" + token, true, time.Time{}, nil
	}
	if v := db.Spec.Backup.Verification; v != nil && v.Suspend {
		return "", false, time.Time{}, nil
	}
	sched, err := cron.ParseStandard(resources.VerificationSchedule(db))
	if err != nil {
		return "", false, time.Time{}, fmt.Errorf("spec.backup.verification.schedule %q: %w", resources.VerificationSchedule(db), err)
	}
	last := db.CreationTimestamp.Time
	if st.LastScheduledVerification != nil {
		last = st.LastScheduledVerification.Time
	}
	if next := sched.Next(last); !now.Before(next) {
		return "scheduled-" + next.UTC().Format("20060102T150405Z"), true, sched.Next(now), nil
	}
	return "", false, sched.Next(now), nil
}

// syncVerification runs spec.backup.verification's Job, one at a time: it
// writes what a finished one found into st.LastVerification (read from
// its pod's termination message), and starts the next one when due,
// deleting the finished one first (its result is in the status by then).
// There is nothing to verify before the first base backup. It returns
// when to look again (zero: the Job's watch says).
func (s *syncer) syncVerification(ctx context.Context, db *dbv1.Database, eng engine.Engine, tls resources.ServerTLS, st, prev *dbv1.BackupStatus, now time.Time) (time.Duration, error) {
	st.LastVerification, st.LastScheduledVerification, st.LastVerifyToken = prev.LastVerification, prev.LastScheduledVerification, prev.LastVerifyToken
	name := resources.VerificationJobName(db)
	job := &batchv1.Job{}
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, job); err != nil {
		if !apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("getting verification Job %s: %w", name, err)
		}
		job = nil
	}
	if job != nil {
		id := job.Annotations[resources.AnnotationVerificationID]
		done, failed, at, msg := jobs.Finished(job)
		if !done {
			if st.LastVerification == nil || st.LastVerification.ID != id {
				started := job.CreationTimestamp
				st.LastVerification = &dbv1.VerificationStatus{ID: id, Job: name, Started: &started}
			}
			return 0, nil
		}
		if v := st.LastVerification; v == nil || v.ID != id || v.Finished == nil {
			report, err := s.verificationReport(ctx, job)
			if err != nil {
				return 0, err
			}
			st.LastVerification = verificationStatus(id, job, report, failed, at, msg)
			log.FromContext(ctx).Info("Verification finished", "Job", klog.KObj(job), "id", id, "succeeded", st.LastVerification.Succeeded,
				"backup", st.LastVerification.Backup, "rows", st.LastVerification.Rows, "message", st.LastVerification.Message)
		}
	}
	id, due, next, err := VerificationDue(db, st, now)
	if err != nil {
		return 0, err
	}
	after := time.Duration(0)
	if !next.IsZero() {
		after = next.Sub(now) + time.Second
	}
	if !due || st.LastBaseBackup == nil {
		return after, nil
	}
	if job != nil {
		// its result is recorded above: make room for the next one.
		if err := s.client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground),
			client.Preconditions{UID: &job.UID}); client.IgnoreNotFound(err) != nil {
			return 0, fmt.Errorf("deleting the finished verification Job %s: %w", name, err)
		}
		return archivePollBusy, nil
	}
	desired, err := resources.VerificationJob(db, eng, tls, s.agentImage, id)
	if err != nil {
		return 0, err
	}
	if _, err := s.writer.Apply(ctx, nil, desired); err != nil {
		return 0, fmt.Errorf("creating verification Job %s: %w", name, err)
	}
	log.FromContext(ctx).Info("Started a verification restore", "Job", klog.KRef(db.Namespace, name), "id", id, "backup", st.LastBaseBackup.Label)
	started := metav1.NewTime(now)
	st.LastVerification = &dbv1.VerificationStatus{ID: id, Job: name, Started: &started}
	if token := db.Annotations[dbv1.AnnotationBackupVerifyNow]; id == "on-demand-"+token {
		st.LastVerifyToken = token
	} else {
		st.LastScheduledVerification = &started
	}
	return after, nil
}

// verificationReport is the agentapi.VerifyReport of a finished verification
// Job's pod (its termination message); nil when there is none (the pod
// never ran the verification: see the Job's own failure).
func (s *syncer) verificationReport(ctx context.Context, job *batchv1.Job) (*agentapi.VerifyReport, error) {
	pods := &corev1.PodList{}
	if err := s.client.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabels{jobNameLabel: job.Name}); err != nil {
		return nil, fmt.Errorf("listing the pods of verification Job %s: %w", job.Name, err)
	}
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			if c.Name != resources.VerificationContainer || c.State.Terminated == nil || c.State.Terminated.Message == "" {
				continue
			}
			rep := &agentapi.VerifyReport{}
			if err := json.Unmarshal([]byte(c.State.Terminated.Message), rep); err != nil {
				rep.Error = "the verification pod's report cannot be read: " + conditions.Quote(c.State.Terminated.Message, 300)
			}
			return rep, nil
		}
	}
	return nil, nil
}

// verificationStatus is status.backup.lastVerification of a finished Job.
func verificationStatus(id string, job *batchv1.Job, rep *agentapi.VerifyReport, failed bool, at time.Time, jobMsg string) *dbv1.VerificationStatus {
	started, finished := job.CreationTimestamp, metav1.NewTime(at)
	v := &dbv1.VerificationStatus{ID: id, Job: job.Name, Started: &started, Finished: &finished, Succeeded: !failed}
	switch {
	case rep == nil:
		v.Succeeded = false
		v.Message = "the verification pod wrote no report"
		if jobMsg != "" {
			v.Message += ": " + jobMsg
		}
	default:
		v.Backup, v.ReplayedLSN, v.LatestCommitTime = rep.Backup, rep.ReplayedLSN, rep.LatestCommit
		v.Database, v.Tables, v.Rows = rep.Database, int32(rep.Tables), rep.Rows
		if rep.Error != "" {
			v.Succeeded, v.Message = false, conditions.Quote(rep.Error, maxDetail)
		}
	}
	if !v.Succeeded && v.Message == "" {
		v.Message = "the verification Job failed: " + jobMsg
	}
	return v
}

// verificationCondition turns a healthy BackupReady False when the newest
// finished verification failed.
func verificationCondition(cond metav1.Condition, st *dbv1.BackupStatus) metav1.Condition {
	v := st.LastVerification
	if cond.Status != metav1.ConditionTrue || v == nil || v.Finished == nil || v.Succeeded {
		return cond
	}
	msg := fmt.Sprintf("the verification restore %s (Job %s) failed", v.ID, v.Job)
	if v.Backup != "" {
		msg += " on base backup " + v.Backup
	}
	return conditions.False(dbv1.ConditionBackupReady, dbv1.ReasonVerificationFailed,
		msg+": "+v.Message+"; the archive itself is healthy: see status.backup.lastVerification, and annotate "+
			dbv1.AnnotationBackupVerifyNow+" to verify again")
}
