package backup

import (
	"encoding/json"
	"fmt"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
)

// fillArchive writes rep into st: the archiver's state, the base backups
// and the run that failed last.
func fillArchive(st, prev *dbv1.BackupStatus, rep *agentapi.ArchiveReport) {
	a := &dbv1.ArchiveStatus{
		LastArchivedWAL: rep.LastArchivedWAL, LastArchivedTime: rep.LastArchivedTime,
		LastFailedWAL: rep.LastFailedWAL, LastFailedTime: rep.LastFailedTime,
		LastFailure: rep.LastFailure,
		// MiB: a status that changes with every byte written is a write
		// per look.
		PendingWALBytes: rep.WALBytes >> 20 << 20,
		LastExpiryTime:  rep.ExpiredAt, ExpiryFailure: rep.ExpireError,
	}
	st.Archive = a
	st.BaseBackups = int32(len(rep.Backups))
	if n := newestBackup(rep); n != nil {
		finished := n.Finished
		st.LastSuccessfulTime = &finished
		b := &dbv1.BaseBackupStatus{Label: n.Label, Type: n.Type, Started: &n.Started, Finished: &finished,
			Size: n.Size, RepositorySize: n.RepositorySize, StartLSN: n.StartLSN, StopLSN: n.StopLSN}
		switch {
		case rep.Run != nil && rep.Run.Error == "" && !n.Started.Before(&rep.Run.Started):
			b.Instance, b.Note = rep.Run.Instance, rep.Run.Note
		case prev.LastBaseBackup != nil && prev.LastBaseBackup.Label == n.Label:
			b.Instance, b.Note = prev.LastBaseBackup.Instance, prev.LastBaseBackup.Note
		}
		st.LastBaseBackup = b
		first := rep.Backups[0].Finished
		st.FirstRecoverabilityPoint = &first
	}
	if run := rep.Run; run != nil && run.Error != "" && run.Finished != nil {
		st.LastFailedTime, st.LastFailureMessage = run.Finished, conditions.Quote(run.Error, maxDetail)
		st.LastFailedJob = run.ID
	} else if prev.LastFailedTime != nil {
		st.LastFailedTime, st.LastFailureMessage, st.LastFailedJob = prev.LastFailedTime, prev.LastFailureMessage, prev.LastFailedJob
	}
}

// keepArchive carries the previous status over while no report says more.
func keepArchive(st, prev *dbv1.BackupStatus) {
	st.Archive, st.LastBaseBackup, st.BaseBackups = prev.Archive, prev.LastBaseBackup, prev.BaseBackups
	st.FirstRecoverabilityPoint, st.LastSuccessfulTime = prev.FirstRecoverabilityPoint, prev.LastSuccessfulTime
	st.LastFailedTime, st.LastFailureMessage, st.LastFailedJob = prev.LastFailedTime, prev.LastFailureMessage, prev.LastFailedJob
}

// backupStatusApply is b as an apply configuration, every field: the
// apply configurations are generated from the API types with the same
// JSON fields, so the JSON of one is the other.
func backupStatusApply(b *dbv1.BackupStatus) *dbv1ac.BackupStatusApplyConfiguration {
	out := dbv1ac.BackupStatus()
	if b == nil {
		return out
	}
	raw, err := json.Marshal(b)
	if err == nil {
		err = json.Unmarshal(raw, out)
	}
	if err != nil {
		// both sides are generated from one type: this cannot fail.
		panic(fmt.Sprintf("converting status.backup: %v", err))
	}
	return out
}
