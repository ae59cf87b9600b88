package backup

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
)

// TestVerificationDue: a new annotation token runs at once, once; the
// schedule (weekly by default) runs once per slot from the Database's
// creation on; suspend stops only the schedule; a schedule that cannot be
// parsed is an error naming the field.
func TestVerificationDue(t *testing.T) {
	created := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC) // a Tuesday
	db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
	st := &dbv1.BackupStatus{}

	_, due, next, err := VerificationDue(db, st, created.Add(time.Hour))
	require.NoError(t, err)
	assert.False(t, due)
	assert.Equal(t, time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC), next, "Sunday 05:00")

	id, due, _, err := VerificationDue(db, st, time.Date(2026, 12, 6, 5, 0, 1, 0, time.UTC))
	require.NoError(t, err)
	assert.True(t, due)
	assert.Equal(t, "scheduled-20261206T050000Z", id)
	ran := metav1.NewTime(time.Date(2026, 12, 6, 5, 0, 1, 0, time.UTC))
	st.LastScheduledVerification = &ran
	_, due, _, err = VerificationDue(db, st, time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	assert.False(t, due, "one run per slot")

	db.Annotations = map[string]string{dbv1.AnnotationBackupVerifyNow: "t1"}
	id, due, _, err = VerificationDue(db, st, time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	assert.True(t, due)
	assert.Equal(t, "on-demand-t1", id)
	st.LastVerifyToken = "t1"
	db.Spec.Backup.Verification = &dbv1.BackupVerificationSpec{Suspend: true}
	_, due, _, err = VerificationDue(db, st, time.Date(2026, 12, 20, 9, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	assert.False(t, due, "suspended, and the token ran")

	db.Spec.Backup.Verification = &dbv1.BackupVerificationSpec{Schedule: "61 * * * *"}
	_, _, _, err = VerificationDue(db, st, time.Date(2026, 12, 20, 9, 0, 0, 0, time.UTC))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.backup.verification.schedule")
}

// TestVerificationStatusAndCondition: the report of a verification pod
// becomes status.backup.lastVerification; a failed one turns a healthy
// BackupReady False with VerificationFailed and the pod's own words, and
// a failure without a report (the pod never ran) says the Job's.
func TestVerificationStatusAndCondition(t *testing.T) {
	at := time.Date(2026, 12, 6, 5, 10, 0, 0, time.UTC)
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "orders-verify", CreationTimestamp: metav1.NewTime(at.Add(-10 * time.Minute))}}
	healthy := conditions.True(dbv1.ConditionBackupReady, dbv1.ReasonArchiving, "archiving")

	ok := verificationStatus("scheduled-x", job, &agentapi.VerifyReport{Backup: "20261206-040000F", ReplayedLSN: "0/5000000", Database: "app", Tables: 3, Rows: 1200}, false, at, "")
	assert.True(t, ok.Succeeded)
	assert.Equal(t, int64(1200), ok.Rows)
	assert.Equal(t, "20261206-040000F", ok.Backup)
	assert.Equal(t, healthy, verificationCondition(healthy, &dbv1.BackupStatus{LastVerification: ok}))

	bad := verificationStatus("on-demand-2", job, &agentapi.VerifyReport{Backup: "20261206-040000F",
		Error: "restoring base backup 20261206-040000F: pgbackrest restore: ERROR: [026]: ... checksum mismatch"}, true, at, "BackoffLimitExceeded")
	assert.False(t, bad.Succeeded)
	cond := verificationCondition(healthy, &dbv1.BackupStatus{LastVerification: bad})
	assert.Equal(t, dbv1.ReasonVerificationFailed, cond.Reason)
	assert.Contains(t, cond.Message, "checksum mismatch")
	assert.Contains(t, cond.Message, "20261206-040000F")

	archiveDown := conditions.False(dbv1.ConditionBackupReady, dbv1.ReasonArchiveUnreachable, "the store")
	assert.Equal(t, archiveDown, verificationCondition(archiveDown, &dbv1.BackupStatus{LastVerification: bad}), "the archive's own failure comes first")
	running := &dbv1.VerificationStatus{ID: "on-demand-3", Started: bad.Started}
	assert.Equal(t, healthy, verificationCondition(healthy, &dbv1.BackupStatus{LastVerification: running}), "a running verification says nothing yet")

	lost := verificationStatus("scheduled-y", job, nil, true, at, "DeadlineExceeded: Job was active longer than specified deadline")
	assert.False(t, lost.Succeeded)
	assert.Contains(t, lost.Message, "DeadlineExceeded")
}
