package backup

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// ArchiveView is what the backup controller knows of a Database with an
// object store: its primary's agent's report (nil when no primary
// answers) and the Database's previous status.
type ArchiveView struct {
	// Primary is the primary instance's name, Report its agent's archive
	// report, Status its whole status.
	Primary string
	Report  *agentapi.ArchiveReport
	Status  *agentapi.Status
	// Unreachable says why no report could be read.
	Unreachable string
	// VolumeBytes is the data volume's requested size.
	VolumeBytes int64
	// OnBackupVolume says the repository is the one on the backup volume
	// (spec.backup.volumeRepository), which the messages say plainly.
	OnBackupVolume bool
}

// archiveStaleMargin is how much longer than archive_timeout the archive
// may go without a new segment while the primary writes.
const archiveStaleMargin = 2 * time.Minute

// archiveStuckAfter is how long a completed segment may wait to be
// archived before the archive counts as failing, although no attempt has
// ended yet.
const archiveStuckAfter = 30 * time.Second

// walPilingUpShare is the share of the data volume pg_wal may take while
// archiving fails before WALPilingUp is reported (long before the volume
// is full and the primary stops).
const walPilingUpShare = 0.2

// starting is BackupReady while the archive starts and nothing failed:
// True (reason ArchiveStarting), as a Database on dumps is before its
// first dump, so that Ready does not wait for the first base backup; the
// message says that nothing is recoverable yet. Past spec.backup.maxAge
// since the Database was created, it is BackupStale.
func starting(db *dbv1.Database, msg string, now time.Time) metav1.Condition {
	t := dbv1.ConditionBackupReady
	if maxAge := db.Spec.BackupMaxAge(); maxAge > 0 && !db.CreationTimestamp.IsZero() && now.Sub(db.CreationTimestamp.Time) > maxAge {
		return conditions.False(t, dbv1.ReasonBackupStale, fmt.Sprintf("no base backup has ended since the Database was created at %s, more than spec.backup.maxAge (%s) ago: %s",
			db.CreationTimestamp.UTC().Format(time.RFC3339), maxAge, msg))
	}
	return conditions.True(t, dbv1.ReasonArchiveStarting, msg)
}

// AssessArchive is BackupReady of a Database with an object store, from
// its primary's report: the store's own errors first (each with a reason
// of its own), WAL piling up, a stale archive, then the base backups.
func AssessArchive(db *dbv1.Database, v ArchiveView, now time.Time) metav1.Condition {
	t := dbv1.ConditionBackupReady
	rep := v.Report
	if rep == nil {
		msg := "waiting for the primary's agent to report the archive"
		if v.Unreachable != "" {
			msg += ": " + v.Unreachable
		}
		return starting(db, msg, now)
	}
	where := "s3://" + rep.Repository
	if v.OnBackupVolume {
		where = "the repository on the backup volume (" + where + ")"
	}
	if rep.StanzaError != "" && !rep.StanzaReady {
		reason, hint := classifyStoreError(rep.StanzaError)
		if isOtherServer(rep.StanzaError) {
			return conditions.False(t, dbv1.ReasonRepositoryRefused, fmt.Sprintf(
				"the repository %s holds another server's archive; dbkeeper writes nothing there: %s", where, conditions.Quote(rep.StanzaError, 300)))
		}
		return conditions.False(t, reason, fmt.Sprintf("cannot create the repository %s: %s%s", where, conditions.Quote(rep.StanzaError, 300), hint))
	}
	failing := rep.LastFailedTime != nil && (rep.LastArchivedTime == nil || rep.LastFailedTime.After(rep.LastArchivedTime.Time))
	if failing {
		detail := rep.LastFailure
		if detail == "" {
			detail = "pgBackRest gave no message"
		}
		reason, hint := classifyStoreError(detail)
		msg := fmt.Sprintf("archiving WAL to %s fails since %s (segment %s, %d failures): %s%s", where,
			rep.LastFailedTime.UTC().Format(time.RFC3339), rep.LastFailedWAL, rep.FailedCount, conditions.Quote(detail, 300), hint)
		if pil := walPilingUp(rep, v); pil != "" {
			return conditions.False(t, dbv1.ReasonWALPilingUp, pil+"; "+msg)
		}
		return conditions.False(t, reason, msg)
	}
	if !rep.StanzaReady {
		return starting(db, "creating the repository "+where, now)
	}
	if rep.OldestWaiting != nil && now.Sub(rep.OldestWaiting.Time) > archiveStuckAfter {
		msg := fmt.Sprintf("%d WAL segments wait to be archived to %s, the oldest since %s: archive_command has not succeeded since (a store that does not answer; pgBackRest reports its error when it gives up)",
			rep.WaitingSegments, where, rep.OldestWaiting.UTC().Format(time.RFC3339))
		if pil := walPilingUp(rep, v); pil != "" {
			return conditions.False(t, dbv1.ReasonWALPilingUp, pil+"; "+msg)
		}
		return conditions.False(t, dbv1.ReasonArchiveFailing, msg)
	}
	if stale := archiveStale(db, rep, v.Status, now); stale != "" {
		return conditions.False(t, dbv1.ReasonArchiveStale, stale)
	}
	newest := newestBackup(rep)
	if newest == nil {
		if run := rep.Run; run != nil && run.Error != "" {
			return conditions.False(t, dbv1.ReasonBaseBackupFailed, fmt.Sprintf("the first base backup %q failed: %s", run.ID, conditions.Quote(run.Error, 300)))
		}
		return starting(db, "WAL is archived to "+where+"; the first base backup runs: nothing is recoverable before it ends", now)
	}
	if run := rep.Run; run != nil && run.Error != "" && run.Finished != nil && run.Finished.After(newest.Finished.Time) {
		return conditions.False(t, dbv1.ReasonBaseBackupFailed, fmt.Sprintf("base backup %q failed at %s: %s; WAL is still archived, and a recovery can start from %s",
			run.ID, run.Finished.UTC().Format(time.RFC3339), conditions.Quote(run.Error, 300), newest.Label))
	}
	if maxAge := db.Spec.BackupMaxAge(); maxAge > 0 && now.Sub(newest.Finished.Time) > maxAge {
		return conditions.False(t, dbv1.ReasonBackupStale, fmt.Sprintf("the newest base backup %s finished at %s, more than spec.backup.maxAge (%s) ago",
			newest.Label, newest.Finished.UTC().Format(time.RFC3339), maxAge))
	}
	msg := fmt.Sprintf("WAL is archived to %s", where)
	if rep.LastArchivedWAL != "" && rep.LastArchivedTime != nil {
		msg += fmt.Sprintf(" (last %s at %s)", rep.LastArchivedWAL, rep.LastArchivedTime.UTC().Format(time.RFC3339))
	}
	msg += fmt.Sprintf("; %d base backups, the newest %s at %s; recoverable from %s", len(rep.Backups), newest.Label,
		newest.Finished.UTC().Format(time.RFC3339), rep.Backups[0].Finished.UTC().Format(time.RFC3339))
	if rep.ExpireError != "" {
		msg += "; removing the backups older than spec.backup.recoveryWindow fails, and the repository grows: " + conditions.Quote(rep.ExpireError, 300)
	}
	if v.OnBackupVolume {
		msg += "; this copy is on the backup volume and does not survive losing the cluster or its storage: spec.backup.objectStore does"
	}
	return conditions.True(t, dbv1.ReasonArchiving, msg)
}

// newestBackup is the report's newest base backup, nil without one.
func newestBackup(rep *agentapi.ArchiveReport) *agentapi.BaseBackup {
	if len(rep.Backups) == 0 {
		return nil
	}
	return &rep.Backups[len(rep.Backups)-1]
}

// walPilingUp says how full pg_wal makes the volume while archiving
// fails, empty while it is under walPilingUpShare.
func walPilingUp(rep *agentapi.ArchiveReport, v ArchiveView) string {
	if v.VolumeBytes <= 0 || rep.WALBytes <= 0 {
		return ""
	}
	share := float64(rep.WALBytes) / float64(v.VolumeBytes)
	if share < walPilingUpShare {
		return ""
	}
	left := ""
	if v.Status != nil {
		left = fmt.Sprintf(", %s left", mib(int64(v.Status.VolumeAvailableBytes)))
	}
	return fmt.Sprintf("pg_wal holds %s (%.0f%% of the %s data volume%s) waiting to be archived: when the volume is full the primary stops; fix the object store or grow spec.storage.size",
		mib(rep.WALBytes), share*100, mib(v.VolumeBytes), left)
}

func mib(b int64) string { return fmt.Sprintf("%d MiB", b>>20) }

// archiveStale says why the archive is stale: the primary writes on a
// later segment than the last archived one, and nothing was archived for
// archiveTimeout plus archiveStaleMargin. Empty when it is not.
func archiveStale(db *dbv1.Database, rep *agentapi.ArchiveReport, st *agentapi.Status, now time.Time) string {
	if rep.LastArchivedTime == nil || st == nil || st.CurrentLSN == "" {
		return ""
	}
	limit := resources.ArchiveTimeout(db) + archiveStaleMargin
	age := now.Sub(rep.LastArchivedTime.Time)
	if age <= limit {
		return ""
	}
	// the last archived file may be a segment, a .partial, a .backup
	// label or a .history file: its first 24 characters name the segment
	// (a history file's are not one, and do not count).
	current, err := currentSegment(st)
	last := rep.LastArchivedWAL
	if err != nil || len(last) < 24 || strings.HasSuffix(last, ".history") || !(current > last[:24]) {
		return ""
	}
	return fmt.Sprintf("nothing was archived for %s (the last segment %s at %s) while the primary writes segment %s: more than spec.backup.archiveTimeout plus %s",
		age.Round(time.Second), rep.LastArchivedWAL, rep.LastArchivedTime.UTC().Format(time.RFC3339), current, archiveStaleMargin)
}

// currentSegment is the name of the WAL segment st's primary writes
// (16 MiB segments, the default).
func currentSegment(st *agentapi.Status) (string, error) {
	lsn, err := agentapi.ParseLSN(st.CurrentLSN)
	if err != nil {
		return "", err
	}
	return agentapi.WALFileName(st.Timeline, lsn, 16<<20), nil
}

// classifyStoreError maps a pgBackRest error to a reason of its own and a
// hint of what to fix.
func classifyStoreError(msg string) (reason, hint string) {
	m := strings.ToLower(msg)
	switch {
	case strings.Contains(m, "accessdenied") || strings.Contains(m, "invalidaccesskeyid") || strings.Contains(m, "signaturedoesnotmatch") ||
		strings.Contains(m, "xadminusernotfound") || strings.Contains(m, "failed with 403"):
		return dbv1.ReasonArchiveAccessDenied, " (check spec.backup.objectStore.credentialsSecret)"
	case strings.Contains(m, "nosuchbucket"):
		return dbv1.ReasonArchiveBucketNotFound, " (create the bucket, or fix spec.backup.objectStore.bucket)"
	case strings.Contains(m, "certificate") || strings.Contains(m, "tls") || strings.Contains(m, "ssl"):
		return dbv1.ReasonArchiveTLSFailed, " (check spec.backup.objectStore.endpoint against the store's certificate, and caSecret)"
	case strings.Contains(m, "unable to get address") || strings.Contains(m, "unable to connect") || strings.Contains(m, "connection refused") ||
		strings.Contains(m, "timeout") || strings.Contains(m, "timed out"):
		return dbv1.ReasonArchiveUnreachable, " (the store does not answer at spec.backup.objectStore.endpoint)"
	}
	return dbv1.ReasonArchiveFailing, ""
}

// isOtherServer says whether a stanza-create error means the repository
// holds another server's archive.
func isOtherServer(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "do not match the database") || strings.Contains(m, "system-id") ||
		strings.Contains(m, "does not match") && strings.Contains(m, "stanza")
}
