package backup

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

var t0 = time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)

func job(name string, created time.Time, cond batchv1.JobConditionType, at time.Time, reason string) batchv1.Job {
	j := batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)}}
	if cond != "" {
		j.Status.Conditions = []batchv1.JobCondition{{
			Type: cond, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at), Reason: reason, Message: "pod exited 1",
		}}
		if cond == batchv1.JobComplete {
			j.Status.CompletionTime = &metav1.Time{Time: at}
		}
	}
	return j
}

func TestObserveAndAssess(t *testing.T) {
	created := t0.Add(-48 * time.Hour)
	db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
	db.Spec.Backup.Schedule = "0 2 * * *"
	ok1 := job("b-1", t0.Add(-24*time.Hour), batchv1.JobComplete, t0.Add(-23*time.Hour), "")
	fail2 := job("b-2", t0, batchv1.JobFailed, t0.Add(time.Minute), "BackoffLimitExceeded")
	ok3 := job("b-3", t0.Add(time.Hour), batchv1.JobComplete, t0.Add(61*time.Minute), "")
	running := job("b-4", t0.Add(2*time.Hour), "", time.Time{}, "")

	cases := []struct {
		name    string
		jobs    []batchv1.Job
		now     time.Time
		suspend bool
		reason  string
		status  metav1.ConditionStatus
		contain string
		requeue time.Duration
	}{
		{name: "never succeeded, young", jobs: nil, now: created.Add(time.Hour), reason: dbv1.ReasonBackupScheduled,
			status: metav1.ConditionTrue, requeue: 25*time.Hour + time.Second},
		{name: "never succeeded, older than maxAge", jobs: nil, now: t0, reason: dbv1.ReasonBackupStale,
			status: metav1.ConditionFalse, contain: "no backup has succeeded"},
		{name: "last succeeded recently", jobs: []batchv1.Job{ok1}, now: t0, reason: dbv1.ReasonBackupScheduled,
			status: metav1.ConditionTrue, contain: "succeeded at", requeue: 3*time.Hour + time.Second},
		{name: "last finished failed", jobs: []batchv1.Job{ok1, fail2}, now: t0.Add(2 * time.Minute), reason: dbv1.ReasonLastBackupFailed,
			status: metav1.ConditionFalse, contain: "b-2 failed"},
		{name: "a later success clears the failure", jobs: []batchv1.Job{fail2, ok1, ok3, running}, now: t0.Add(2 * time.Hour),
			reason: dbv1.ReasonBackupScheduled, status: metav1.ConditionTrue, requeue: 25*time.Hour + time.Minute + time.Second},
		{name: "stale success", jobs: []batchv1.Job{ok1}, now: t0.Add(4 * time.Hour), reason: dbv1.ReasonBackupStale,
			status: metav1.ConditionFalse, contain: "last successful backup"},
		{name: "suspended wins", jobs: []batchv1.Job{fail2}, now: t0.Add(time.Hour), suspend: true,
			reason: dbv1.ReasonBackupSuspended, status: metav1.ConditionTrue},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := db.DeepCopy()
			d.Spec.Backup.Suspend = tc.suspend
			cond, requeue := Assess(d, Observe(nil, tc.jobs, nil), tc.now)
			assert.Equal(t, tc.reason, cond.Reason, cond.Message)
			assert.Equal(t, tc.status, cond.Status)
			assert.Contains(t, cond.Message, tc.contain)
			assert.Equal(t, tc.requeue, requeue)
		})
	}
}

func TestObserveRecordsTheNewestOfEach(t *testing.T) {
	fail2 := job("b-2", t0, batchv1.JobFailed, t0.Add(time.Minute), "DeadlineExceeded")
	h := Observe(&batchv1.CronJob{Status: batchv1.CronJobStatus{LastScheduleTime: &metav1.Time{Time: t0}}}, []batchv1.Job{
		job("b-1", t0.Add(-time.Hour), batchv1.JobComplete, t0.Add(-50*time.Minute), ""),
		fail2,
		job("b-3", t0.Add(time.Hour), "", time.Time{}, ""),
	}, nil)
	assert.Equal(t, t0, h.LastSchedule.Time)
	assert.Equal(t, "b-3", h.LastJob, "the newest Job, finished or not")
	assert.Equal(t, t0.Add(-50*time.Minute), h.LastSuccess.Time)
	assert.Equal(t, "b-2", h.LastFailedJob)
	assert.Equal(t, "DeadlineExceeded: pod exited 1", h.LastFailureMessage)
	assert.True(t, h.lastFinishedFailed)
}

// TestHistoryNeverGoesBackwards: Jobs go away (the TTL of on-demand Jobs,
// the CronJob's history limit), and what they told must stay in the status:
// merged with the previous status, no time, Job name or failure is
// forgotten or replaced by an older one.
func TestHistoryNeverGoesBackwards(t *testing.T) {
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: t0.Add(d)} }
	db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(t0.Add(-48 * time.Hour))}}
	db.Spec.Backup.Schedule = "0 2 * * *"
	// The scheduled b-1 succeeded, then the on-demand b-now-1 failed; its
	// Job is gone now, only b-1 is left.
	prev := &dbv1.BackupStatus{
		LastScheduleTime:   at(-24 * time.Hour),
		LastSuccessfulTime: at(-23 * time.Hour),
		LastFailedTime:     at(time.Minute),
		LastJob:            "b-now-1",
		LastFailedJob:      "b-now-1",
		LastFailureMessage: "BackoffLimitExceeded: pod exited 1",
	}
	ok1 := job("b-1", t0.Add(-24*time.Hour), batchv1.JobComplete, t0.Add(-23*time.Hour), "")

	for name, jobs := range map[string][]batchv1.Job{
		"the failed Job was deleted": {ok1},
		"every Job was deleted":      nil,
	} {
		t.Run(name, func(t *testing.T) {
			h := Merge(Observe(nil, jobs, nil), prev)
			assert.Equal(t, prev.LastScheduleTime, h.LastSchedule)
			assert.Equal(t, prev.LastSuccessfulTime, h.LastSuccess)
			assert.Equal(t, prev.LastFailedTime, h.LastFailure)
			assert.Equal(t, "b-now-1", h.LastJob)
			assert.Equal(t, "b-now-1", h.LastFailedJob)
			assert.Equal(t, prev.LastFailureMessage, h.LastFailureMessage)
			cond, _ := Assess(db, h, t0.Add(time.Hour))
			assert.Equal(t, dbv1.ReasonLastBackupFailed, cond.Reason, "the failure is still the last finished backup: %s", cond.Message)
		})
	}

	t.Run("newer Jobs win", func(t *testing.T) {
		ok2 := job("b-2", t0.Add(time.Hour), batchv1.JobComplete, t0.Add(61*time.Minute), "")
		running := job("b-3", t0.Add(2*time.Hour), "", time.Time{}, "")
		h := Merge(Observe(nil, []batchv1.Job{ok1, ok2, running}, nil), prev)
		assert.Equal(t, t0.Add(61*time.Minute), h.LastSuccess.Time)
		assert.Equal(t, "b-3", h.LastJob)
		assert.Equal(t, "b-now-1", h.LastFailedJob, "the last failure is still the last failure")
		cond, _ := Assess(db, h, t0.Add(2*time.Hour))
		assert.Equal(t, dbv1.ReasonBackupScheduled, cond.Reason, cond.Message)
	})

	t.Run("no previous status", func(t *testing.T) {
		observed := Observe(nil, []batchv1.Job{ok1}, nil)
		assert.Equal(t, observed, Merge(observed, nil))
	})
}

// failedPod is a pod of job that ended with exit code and termination
// message msg.
func failedPod(name, job string, created time.Time, code int32, msg string) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created), Labels: map[string]string{batchv1.JobNameLabel: job}},
		Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{
			Name: "backup", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Message: msg}},
		}}},
	}
}

// TestFailureSaysWhatThePodSaid: a failed backup's message carries the last
// line the dump container logged (its termination message), from the
// newest failed pod of that Job, cut to a bounded length; or its exit code
// when it said nothing; or only the Job's reason when its pods are gone.
func TestFailureSaysWhatThePodSaid(t *testing.T) {
	failed := job("b-now-1", t0, batchv1.JobFailed, t0.Add(time.Minute), "BackoffLimitExceeded")
	// as the server writes it, with two spaces after FATAL:, and as quoted
	denied := `pg_dump: error: connection to server at "app.shop.svc" (198.19.0.7), port 5432 failed: FATAL:  password authentication failed for user "app"`
	quoted := `pg_dump: error: connection to server at "app.shop.svc" (198.19.0.7), port 5432 failed: FATAL: password authentication failed for user "app"`
	cases := []struct {
		name string
		pods []corev1.Pod
		want string
	}{
		{"gone", nil, "BackoffLimitExceeded: pod exited 1"},
		{"last line", []corev1.Pod{failedPod("b-now-1-x", "b-now-1", t0, 1, "starting\n"+denied+"\n")},
			"BackoffLimitExceeded: pod exited 1; pod b-now-1-x: " + quoted},
		{"newest pod", []corev1.Pod{
			failedPod("b-now-1-a", "b-now-1", t0, 1, "old"),
			failedPod("b-now-1-b", "b-now-1", t0.Add(time.Second), 2, "new"),
			failedPod("other-c", "other", t0.Add(time.Hour), 1, "not this Job's"),
		}, "BackoffLimitExceeded: pod exited 1; pod b-now-1-b: new"},
		{"silent", []corev1.Pod{failedPod("b-now-1-x", "b-now-1", t0, 137, "")},
			"BackoffLimitExceeded: pod exited 1; pod b-now-1-x: container backup exited with code 137"},
		{"long", []corev1.Pod{failedPod("b-now-1-x", "b-now-1", t0, 1, strings.Repeat("x", 1000))},
			"BackoffLimitExceeded: pod exited 1; pod b-now-1-x: " + strings.Repeat("x", maxDetail) + "…"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := Observe(nil, []batchv1.Job{failed}, tc.pods)
			assert.Equal(t, tc.want, h.LastFailureMessage)
		})
	}
}
