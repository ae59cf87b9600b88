package backup

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
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
	}
	raw, err := json.Marshal(backupStatusApply(in))
	require.NoError(t, err)
	out := &dbv1.BackupStatus{}
	require.NoError(t, json.Unmarshal(raw, out))
	assert.Equal(t, in, out)
}
