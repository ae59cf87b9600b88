package backup

import (
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/jobs"
)

// namedApplyConfiguration is an apply configuration of a named object.
type namedApplyConfiguration interface {
	runtime.ApplyConfiguration
	GetName() *string
}

// History is what the CronJob and its Jobs tell about the last backups.
type History struct {
	LastSchedule       *metav1.Time
	LastSuccess        *metav1.Time
	LastFailure        *metav1.Time
	LastJob            string
	LastFailedJob      string
	LastFailureMessage string
	// OnDemandToken is the backup-now token that last ran.
	OnDemandToken string
	// RestoredFrom is the dump spec.bootstrap restored.
	RestoredFrom string
	// lastFinishedFailed is true when the most recently finished Job failed.
	lastFinishedFailed bool
	// lastJobCreated is when LastJob was created, if Observe saw it.
	lastJobCreated time.Time
	// jobs are the names of the Jobs Observe saw.
	jobs map[string]bool
}

// Observe reads the history off the CronJob (which may be nil), the backup
// Jobs and their pods. Only finished Jobs count as successes or failures; a
// failure's message is the Job's reason, with what its pod said (see
// failureDetail).
func Observe(cron *batchv1.CronJob, seen []batchv1.Job, pods []corev1.Pod) History {
	h := History{jobs: map[string]bool{}}
	if cron != nil {
		h.LastSchedule = cron.Status.LastScheduleTime
	}
	var lastFinished time.Time
	for i := range seen {
		j := &seen[i]
		h.jobs[j.Name] = true
		if t := j.CreationTimestamp.Time; t.After(h.lastJobCreated) {
			h.lastJobCreated, h.LastJob = t, j.Name
		}
		done, failed, at, msg := jobs.Finished(j)
		if !done {
			continue
		}
		if at.After(lastFinished) {
			lastFinished, h.lastFinishedFailed = at, failed
		}
		switch {
		case failed && (h.LastFailure == nil || at.After(h.LastFailure.Time)):
			if detail := failureDetail(j.Name, pods); detail != "" {
				msg += "; " + detail
			}
			h.LastFailure, h.LastFailedJob, h.LastFailureMessage = &metav1.Time{Time: at}, j.Name, msg
		case !failed && (h.LastSuccess == nil || at.After(h.LastSuccess.Time)):
			h.LastSuccess = &metav1.Time{Time: at}
		}
	}
	return h
}

// Merge is the observed history merged with the previous status (which may
// be nil), so that nothing goes backwards when Jobs are deleted (on-demand
// Jobs by their TTL, scheduled ones by the CronJob's history limit): each
// time is the later of the two, with the failed Job and its message; the
// last Job stays the previous one while that is gone and no live Job is
// known to be newer (created after the last recorded finish: a deleted Job
// had finished). Whether the last finished backup failed follows from the
// merged times.
func Merge(h History, prev *dbv1.BackupStatus) History {
	if prev == nil {
		return h
	}
	h.LastSchedule = later(h.LastSchedule, prev.LastScheduleTime)
	h.LastSuccess = later(h.LastSuccess, prev.LastSuccessfulTime)
	if prev.LastFailedTime != nil && (h.LastFailure == nil || prev.LastFailedTime.After(h.LastFailure.Time)) {
		h.LastFailure, h.LastFailedJob, h.LastFailureMessage = prev.LastFailedTime, prev.LastFailedJob, prev.LastFailureMessage
	}
	if prev.LastJob != "" && prev.LastJob != h.LastJob && !h.jobs[prev.LastJob] {
		if finished := later(h.LastSuccess, h.LastFailure); h.LastJob == "" || finished == nil || !h.lastJobCreated.After(finished.Time) {
			h.LastJob, h.lastJobCreated = prev.LastJob, time.Time{}
		}
	}
	h.lastFinishedFailed = h.LastFailure != nil && (h.LastSuccess == nil || h.LastFailure.After(h.LastSuccess.Time))
	return h
}

// later is the later of two times, either of which may be nil.
func later(a, b *metav1.Time) *metav1.Time {
	if a == nil || (b != nil && b.After(a.Time)) {
		return b
	}
	return a
}

// Assess turns the history into BackupReady and says when to look again,
// because staleness comes with time alone:
//   - Suspended (True) when spec.backup.suspend is set;
//   - LastBackupFailed (False) when the most recently finished Job failed;
//   - BackupStale (False) when the last success, or the Database's creation
//     if none succeeded, is older than spec.backup.maxAge;
//   - Scheduled (True) otherwise.
func Assess(db *dbv1.Database, h History, now time.Time) (metav1.Condition, time.Duration) {
	t := dbv1.ConditionBackupReady
	if db.Spec.Backup.Suspend {
		return conditions.True(t, dbv1.ReasonBackupSuspended, "spec.backup.suspend is true: no backup is scheduled"), 0
	}
	if h.lastFinishedFailed {
		return conditions.False(t, dbv1.ReasonLastBackupFailed, fmt.Sprintf("backup Job %s failed at %s: %s",
			h.LastFailedJob, h.LastFailure.UTC().Format(time.RFC3339), h.LastFailureMessage)), 0
	}
	maxAge := db.Spec.BackupMaxAge()
	since, what := db.CreationTimestamp.Time, "no backup has succeeded since the Database was created"
	if h.LastSuccess != nil {
		since, what = h.LastSuccess.Time, "the last successful backup finished"
	}
	if maxAge > 0 {
		if age := now.Sub(since); age > maxAge {
			return conditions.False(t, dbv1.ReasonBackupStale, fmt.Sprintf("%s at %s, more than spec.backup.maxAge (%s) ago",
				what, since.UTC().Format(time.RFC3339), maxAge)), 0
		}
	}
	msg := fmt.Sprintf("backups run on schedule %q", db.Spec.Backup.Schedule)
	if h.LastSuccess != nil {
		msg += "; the last one succeeded at " + h.LastSuccess.UTC().Format(time.RFC3339)
	}
	var after time.Duration
	if maxAge > 0 {
		after = since.Add(maxAge).Sub(now) + time.Second
	}
	return conditions.True(t, dbv1.ReasonBackupScheduled, msg), after
}

func statusOf(h History) *dbv1ac.DatabaseStatusApplyConfiguration {
	b := dbv1ac.BackupStatus()
	if h.LastSchedule != nil {
		b.WithLastScheduleTime(*h.LastSchedule)
	}
	if h.LastSuccess != nil {
		b.WithLastSuccessfulTime(*h.LastSuccess)
	}
	if h.LastFailure != nil {
		b.WithLastFailedTime(*h.LastFailure).WithLastFailedJob(h.LastFailedJob).WithLastFailureMessage(h.LastFailureMessage)
	}
	if h.LastJob != "" {
		b.WithLastJob(h.LastJob)
	}
	if h.OnDemandToken != "" {
		b.WithLastOnDemandToken(h.OnDemandToken)
	}
	if h.RestoredFrom != "" {
		b.WithRestoredFrom(h.RestoredFrom)
	}
	return dbv1ac.DatabaseStatus().WithBackup(b)
}

// maxDetail bounds the quote of a pod's termination message in
// status.backup.lastFailureMessage.
const maxDetail = 300

// failureDetail is what the last failed pod of the Job said when its
// container ended: the last line of its termination message (a dump
// container's last log line, e.g. "pg_dump: error: connection to server
// ... failed: FATAL: password authentication failed for user \"app\""), or
// its exit code without one; "" when no pod of the Job is left. A
// terminated container's message never changes, so neither does this.
func failureDetail(job string, pods []corev1.Pod) string {
	var last *corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.Labels[batchv1.JobNameLabel] != job || p.Status.Phase != corev1.PodFailed {
			continue
		}
		if last == nil || p.CreationTimestamp.After(last.CreationTimestamp.Time) ||
			(p.CreationTimestamp.Equal(&last.CreationTimestamp) && p.Name > last.Name) {
			last = p
		}
	}
	if last == nil {
		return ""
	}
	for _, cs := range last.Status.ContainerStatuses {
		term := cs.State.Terminated
		if term == nil || term.ExitCode == 0 {
			continue
		}
		lines := strings.Split(strings.TrimSpace(term.Message), "\n")
		said := conditions.Quote(lines[len(lines)-1], maxDetail)
		if said == "" {
			return fmt.Sprintf("pod %s: container %s exited with code %d", last.Name, cs.Name, term.ExitCode)
		}
		return fmt.Sprintf("pod %s: %s", last.Name, said)
	}
	return ""
}
