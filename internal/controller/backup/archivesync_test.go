package backup

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// TestBackupStatusApplyKeepsEveryField: what the backup controller applies
// is the whole status.backup, so that no field it owns is dropped by a
// later apply.
func TestBackupStatusApplyKeepsEveryField(t *testing.T) {
	at := metav1.Unix(1_800_000_000, 0)
	in := &dbv1.BackupStatus{
		LastScheduleTime: &at, LastSuccessfulTime: &at, LastFailedTime: &at, LastJob: "j", LastFailedJob: "f",
		LastFailureMessage: "m", RestoredFrom: "r", LastOnDemandToken: "t", RepositoryPath: "/p",
		Archive: &dbv1.ArchiveStatus{LastArchivedWAL: "w", LastArchivedTime: &at, LastFailedWAL: "x", LastFailedTime: &at,
			LastFailure: "e", PendingWALBytes: 1 << 20, VolumeAvailableBytes: 2 << 20},
		LastBaseBackup: &dbv1.BaseBackupStatus{Label: "l", Type: "full", Started: &at, Finished: &at, Size: 1, RepositorySize: 2,
			Instance: "db-0", StartLSN: "0/1", StopLSN: "0/2"},
		BaseBackups: 3, FirstRecoverabilityPoint: &at, LastScheduledBaseBackup: &at,
		Recovery: &dbv1.RecoveryStatus{Source: "s", Target: "t", Finished: &at, ReplayedLSN: "0/3"},
		LastVerification: &dbv1.VerificationStatus{ID: "v", Job: "j", Started: &at, Finished: &at, Succeeded: true, Backup: "l",
			ReplayedLSN: "0/4", LatestCommitTime: &at, Database: "app", Tables: 2, Rows: 9, Message: "m"},
		LastScheduledVerification: &at, LastVerifyToken: "vt",
	}
	raw, err := json.Marshal(backupStatusApply(in))
	require.NoError(t, err)
	out := &dbv1.BackupStatus{}
	require.NoError(t, json.Unmarshal(raw, out))
	assert.Equal(t, in, out)
}

// TestRetryDue: a failed base backup is asked again once firstBackupRetry
// has passed, not before, and not when a newer one finished since or the
// last run succeeded.
func TestRetryDue(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	at := func(ago time.Duration) *metav1.Time { m := metav1.NewTime(now.Add(-ago)); return &m }
	older := agentapi.BaseBackup{Label: "old", Finished: *at(48 * time.Hour)}
	failed := func(ago time.Duration) *agentapi.BackupRun {
		return &agentapi.BackupRun{ID: "scheduled-x", Started: *at(ago + time.Minute), Finished: at(ago), Error: "interrupted"}
	}
	assert.True(t, RetryDue(&agentapi.ArchiveReport{Backups: []agentapi.BaseBackup{older}, Run: failed(10 * time.Minute)}, now))
	assert.False(t, RetryDue(&agentapi.ArchiveReport{Backups: []agentapi.BaseBackup{older}, Run: failed(time.Minute)}, now), "too soon")
	newer := agentapi.BaseBackup{Label: "new", Finished: *at(5 * time.Minute)}
	assert.False(t, RetryDue(&agentapi.ArchiveReport{Backups: []agentapi.BaseBackup{older, newer}, Run: failed(10 * time.Minute)}, now), "a newer backup finished")
	ok := failed(10 * time.Minute)
	ok.Error = ""
	assert.False(t, RetryDue(&agentapi.ArchiveReport{Backups: []agentapi.BaseBackup{older}, Run: ok}, now), "the last run succeeded")
	assert.False(t, RetryDue(&agentapi.ArchiveReport{Backups: []agentapi.BaseBackup{older}}, now), "no run")
}

// TestLastBaseBackupNamesItsInstance: status.backup.lastBaseBackup's
// instance is the run's, a standby's when the agent copied a standby's
// files; a later report without the run (another primary since) keeps it
// for the same backup.
func TestLastBaseBackupNamesItsInstance(t *testing.T) {
	start := metav1.Unix(1_800_000_000, 0)
	end := metav1.Unix(1_800_000_060, 0)
	b1 := agentapi.BaseBackup{Label: "b1", Type: "full", Started: start, Finished: end}
	run := &agentapi.BackupRun{ID: "r1", Type: "full", Instance: "orders-1", Started: metav1.Unix(1_799_999_999, 0), Finished: &end,
		Note: "taken from standby orders-1"}
	st, prev := &dbv1.BackupStatus{}, &dbv1.BackupStatus{}
	fillArchive(st, prev, &agentapi.ArchiveReport{Backups: []agentapi.BaseBackup{b1}, Run: run})
	require.NotNil(t, st.LastBaseBackup)
	assert.Equal(t, "orders-1", st.LastBaseBackup.Instance)
	assert.Equal(t, "taken from standby orders-1", st.LastBaseBackup.Note)

	again := &dbv1.BackupStatus{}
	fillArchive(again, st, &agentapi.ArchiveReport{Backups: []agentapi.BaseBackup{b1}})
	assert.Equal(t, "orders-1", again.LastBaseBackup.Instance, "the same backup, reported by a primary that did not run it")
	assert.Equal(t, "taken from standby orders-1", again.LastBaseBackup.Note)
}

// TestExpiryReachesTheStatus: the primary's last expiry and its failure
// are status.backup.archive's.
func TestExpiryReachesTheStatus(t *testing.T) {
	at := metav1.Unix(1_800_000_000, 0)
	st := &dbv1.BackupStatus{}
	fillArchive(st, &dbv1.BackupStatus{}, &agentapi.ArchiveReport{ExpiredAt: &at, ExpireError: "ERROR: [039]: HTTP request failed"})
	require.NotNil(t, st.Archive)
	assert.Equal(t, &at, st.Archive.LastExpiryTime)
	assert.Equal(t, "ERROR: [039]: HTTP request failed", st.Archive.ExpiryFailure)
}
