package backup

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// TestAssessArchive: each state of the archive has a reason of its own,
// and the store's own error reaches the message.
func TestAssessArchive(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	at := func(ago time.Duration) *metav1.Time { m := metav1.NewTime(now.Add(-ago)); return &m }
	db := &dbv1.Database{Spec: dbv1.DatabaseSpec{Backup: dbv1.BackupSpec{
		ObjectStore:    &dbv1.ObjectStoreSpec{Endpoint: "s3.example", Bucket: "b", CredentialsSecret: "c"},
		ArchiveTimeout: &metav1.Duration{Duration: time.Minute},
		MaxAge:         &metav1.Duration{Duration: 26 * time.Hour},
	}}}
	backups := []agentapi.BaseBackup{{Label: "20261205-110000F", Type: "full", Started: *at(time.Hour), Finished: *at(time.Hour - time.Minute)}}
	healthy := func() *agentapi.ArchiveReport {
		return &agentapi.ArchiveReport{Repository: "b/dbkeeper/ns/db/uid", StanzaReady: true,
			LastArchivedWAL: "000000010000000000000005", LastArchivedTime: at(10 * time.Second), Backups: backups}
	}
	primary := &agentapi.Status{Role: agentapi.RolePrimary, Ready: true, Timeline: 1, CurrentLSN: "0/6000060", VolumeAvailableBytes: 8 << 30}
	gib := resource.MustParse("10Gi")

	for _, tc := range []struct {
		name    string
		report  func(r *agentapi.ArchiveReport)
		status  *agentapi.Status
		reason  string
		message string
	}{
		{name: "healthy", reason: dbv1.ReasonArchiving, message: "1 base backups"},
		{name: "wrong credentials", reason: dbv1.ReasonArchiveAccessDenied, message: "InvalidAccessKeyId",
			report: func(r *agentapi.ArchiveReport) {
				r.LastFailedTime, r.LastFailedWAL, r.FailedCount = at(time.Second), "000000010000000000000006", 3
				r.LastFailure = "ERROR: [039]: HTTP request failed with 403 (Forbidden): *** Path/Query *** ... <Code>InvalidAccessKeyId</Code>"
			}},
		{name: "no bucket", reason: dbv1.ReasonArchiveBucketNotFound, message: "create the bucket",
			report: func(r *agentapi.ArchiveReport) {
				r.LastFailedTime = at(time.Second)
				r.LastFailure = "ERROR: [039]: HTTP request failed with 404 (Not Found): <Code>NoSuchBucket</Code>"
			}},
		{name: "TLS", reason: dbv1.ReasonArchiveTLSFailed, message: "caSecret",
			report: func(r *agentapi.ArchiveReport) {
				r.LastFailedTime = at(time.Second)
				r.LastFailure = "ERROR: [073]: unable to find hostname 's3.example' in certificate common name or subject alternative names"
			}},
		{name: "unreachable", reason: dbv1.ReasonArchiveUnreachable,
			report: func(r *agentapi.ArchiveReport) {
				r.LastFailedTime = at(time.Second)
				r.LastFailure = "ERROR: [049]: unable to connect to 's3.example:443': [111] Connection refused"
			}},
		{name: "unreachable, with 403 in the path", reason: dbv1.ReasonArchiveUnreachable,
			report: func(r *agentapi.ArchiveReport) {
				r.LastFailedTime = at(time.Second)
				r.LastFailure = "ERROR: [103]: unable to find a valid repository: repo1: [FileReadError] unable to load info file " +
					"'/dbkeeper/ns/db/7d403e1c/archive/db/archive.info': FileReadError: timeout after 10000ms waiting for read from 's3.example:9403'"
			}},
		{name: "a push that timed out", reason: dbv1.ReasonArchiveUnreachable, message: "did not answer",
			report: func(r *agentapi.ArchiveReport) {
				r.LastFailedTime = at(time.Second)
				r.LastFailure = "ERROR: archive-push timed out after 120s: the store did not answer"
			}},
		{name: "WAL piling up", reason: dbv1.ReasonWALPilingUp, message: "grow spec.storage.size",
			report: func(r *agentapi.ArchiveReport) {
				r.LastFailedTime = at(time.Second)
				r.LastFailure = "ERROR: [049]: unable to connect"
				r.WALBytes = 3 << 30
			}},
		{name: "a repository of another server", reason: dbv1.ReasonRepositoryRefused, message: "another server's archive",
			report: func(r *agentapi.ArchiveReport) {
				r.StanzaReady = false
				r.StanzaError = "pgbackrest stanza-create: ERROR: [028]: backup and archive info files exist but do not match the database"
			}},
		{name: "segments wait, no attempt ended", reason: dbv1.ReasonArchiveFailing, message: "3 WAL segments wait",
			report: func(r *agentapi.ArchiveReport) { r.WaitingSegments, r.OldestWaiting = 3, at(90*time.Second) }},
		{name: "a segment waits a moment", reason: dbv1.ReasonArchiving,
			report: func(r *agentapi.ArchiveReport) { r.WaitingSegments, r.OldestWaiting = 1, at(5*time.Second) }},
		{name: "stale", reason: dbv1.ReasonArchiveStale, message: "nothing was archived",
			report: func(r *agentapi.ArchiveReport) { r.LastArchivedTime = at(10 * time.Minute) }},
		{name: "quiet, not stale", reason: dbv1.ReasonArchiving,
			report: func(r *agentapi.ArchiveReport) {
				r.LastArchivedTime, r.LastArchivedWAL = at(10*time.Minute), "000000010000000000000006"
			}},
		{name: "expiry fails", reason: dbv1.ReasonArchiving, message: "the repository grows: ERROR: [039]: HTTP request failed",
			report: func(r *agentapi.ArchiveReport) { r.ExpireError = "ERROR: [039]: HTTP request failed" }},
		{name: "no base backup yet", reason: dbv1.ReasonArchiveStarting, message: "first base backup",
			report: func(r *agentapi.ArchiveReport) { r.Backups = nil }},
		{name: "the last base backup failed", reason: dbv1.ReasonBaseBackupFailed, message: "disk quota",
			report: func(r *agentapi.ArchiveReport) {
				r.Run = &agentapi.BackupRun{ID: "scheduled-x", Started: *at(time.Minute), Finished: at(time.Second), Error: "ERROR: disk quota"}
			}},
		{name: "base backup older than maxAge", reason: dbv1.ReasonBackupStale,
			report: func(r *agentapi.ArchiveReport) {
				r.Backups = []agentapi.BaseBackup{{Label: "old", Finished: *at(30 * time.Hour)}}
			}},
		{name: "no report", reason: dbv1.ReasonArchiveStarting, status: &agentapi.Status{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := healthy()
			if tc.report != nil {
				tc.report(rep)
			}
			v := ArchiveView{Primary: "db-0", Report: rep, Status: primary, VolumeBytes: gib.Value()}
			if tc.status != nil {
				v.Report, v.Status = nil, tc.status
			}
			cond := AssessArchive(db, v, now)
			assert.Equal(t, tc.reason, cond.Reason, cond.Message)
			assert.Contains(t, cond.Message, tc.message)
			healthy := tc.reason == dbv1.ReasonArchiving || tc.reason == dbv1.ReasonArchiveStarting
			assert.Equal(t, healthy, cond.Status == metav1.ConditionTrue, "starting or archiving is True, so Ready does not wait for the first base backup: %s", cond.Message)
		})
	}
}

// TestArchiveStaleAfterABackupLabel: the last archived file may be a base
// backup's label; its segment still counts.
func TestArchiveStaleAfterABackupLabel(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	old := metav1.NewTime(now.Add(-time.Hour))
	db := &dbv1.Database{Spec: dbv1.DatabaseSpec{Backup: dbv1.BackupSpec{ObjectStore: &dbv1.ObjectStoreSpec{}}}}
	rep := &agentapi.ArchiveReport{StanzaReady: true, LastArchivedWAL: "000000010000000000000004.00000028.backup", LastArchivedTime: &old,
		Backups: []agentapi.BaseBackup{{Label: "f", Finished: old}}}
	cond := AssessArchive(db, ArchiveView{Report: rep, Status: &agentapi.Status{Timeline: 1, CurrentLSN: "0/9000000"}}, now)
	assert.Equal(t, dbv1.ReasonArchiveStale, cond.Reason, cond.Message)
}

// TestArchiveStartingTurnsStale: a Database whose first base backup has
// not ended maxAge after its creation is BackupStale, whatever holds it.
func TestArchiveStartingTurnsStale(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	db := &dbv1.Database{Spec: dbv1.DatabaseSpec{Backup: dbv1.BackupSpec{ObjectStore: &dbv1.ObjectStoreSpec{}}}}
	db.CreationTimestamp = metav1.NewTime(now.Add(-time.Hour))
	cond := AssessArchive(db, ArchiveView{}, now)
	assert.Equal(t, dbv1.ReasonArchiveStarting, cond.Reason, cond.Message)
	assert.Equal(t, metav1.ConditionTrue, cond.Status)

	db.CreationTimestamp = metav1.NewTime(now.Add(-db.Spec.BackupMaxAge() - time.Minute))
	cond = AssessArchive(db, ArchiveView{}, now)
	assert.Equal(t, dbv1.ReasonBackupStale, cond.Reason, cond.Message)
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Contains(t, cond.Message, "waiting for the primary's agent")
}
