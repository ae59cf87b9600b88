package agentapi

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BackupPath starts a base backup (POST, a BackupRequest; 202 and the
// BackupRun) on the primary.
const BackupPath = "/backup"

// BackupRequest is the body of POST BackupPath.
type BackupRequest struct {
	// ID names the request: a second request of the same ID returns the
	// run it started instead of starting another (the operator may ask
	// again after a restart).
	ID string `json:"id"`
	// Type is pgBackRest's full, diff or incr (the first backup is full
	// whatever is asked).
	Type string `json:"type,omitempty"`
}

// BackupRun is a base backup the agent runs or ran: pgBackRest only
// counts a backup that finished, so a run cut short (the agent or its
// pod stopped) leaves nothing that could be restored by mistake, and the
// next backup resumes or removes what it wrote.
type BackupRun struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	// Instance is the pod whose files are copied: a streaming standby's
	// when there is one, else the primary's.
	Instance string       `json:"instance"`
	Started  metav1.Time  `json:"started"`
	Finished *metav1.Time `json:"finished,omitempty"`
	// Error is pgBackRest's message when the run failed.
	Error string `json:"error,omitempty"`
	// Note says where the files come from and, for the primary's, why
	// not a standby's.
	Note string `json:"note,omitempty"`
}

// ArchiveReport is what an instance with a Repository says of it, in its
// Status; the primary's is the Database's.
type ArchiveReport struct {
	// Repository is bucket/path.
	Repository string `json:"repository"`
	// StanzaReady says the repository was created (or found) for this
	// server; StanzaError says why not (another server's archive there,
	// the store's error).
	StanzaReady bool   `json:"stanzaReady,omitempty"`
	StanzaError string `json:"stanzaError,omitempty"`
	// The primary's pg_stat_archiver.
	ArchivedCount    int64        `json:"archivedCount,omitempty"`
	LastArchivedWAL  string       `json:"lastArchivedWAL,omitempty"`
	LastArchivedTime *metav1.Time `json:"lastArchivedTime,omitempty"`
	FailedCount      int64        `json:"failedCount,omitempty"`
	LastFailedWAL    string       `json:"lastFailedWAL,omitempty"`
	LastFailedTime   *metav1.Time `json:"lastFailedTime,omitempty"`
	// LastFailure is pgBackRest's last archive-push error.
	LastFailure string `json:"lastFailure,omitempty"`
	// WALBytes is the size of pg_wal.
	WALBytes int64 `json:"walBytes,omitempty"`
	// WaitingSegments counts the completed segments waiting to be
	// archived (pg_wal/archive_status/*.ready), OldestWaiting is when the
	// oldest of them was completed: an archive_command that hangs (a store
	// that does not answer) shows here before pgBackRest gives up.
	WaitingSegments int          `json:"waitingSegments,omitempty"`
	OldestWaiting   *metav1.Time `json:"oldestWaiting,omitempty"`
	// StatsAt is when the primary's statistics were read.
	StatsAt *metav1.Time `json:"statsAt,omitempty"`
	// Backups are the repository's base backups, oldest first, as
	// `pgbackrest info` last said; InfoError why it could not.
	Backups   []BaseBackup `json:"backups,omitempty"`
	InfoError string       `json:"infoError,omitempty"`
	// ArchiveMin and ArchiveMax are the oldest and newest WAL segments in
	// the archive.
	ArchiveMin string `json:"archiveMin,omitempty"`
	ArchiveMax string `json:"archiveMax,omitempty"`
	// Run is the last base backup this agent ran (or runs).
	Run *BackupRun `json:"run,omitempty"`
	// ExpiredAt is when this agent last expired the repository: it kept
	// every backup and WAL segment a point of the recovery window ending
	// then needs. ExpireError is pgBackRest's message when the last
	// expiry failed.
	ExpiredAt   *metav1.Time `json:"expiredAt,omitempty"`
	ExpireError string       `json:"expireError,omitempty"`
}

// BaseBackup is one base backup in the repository.
type BaseBackup struct {
	Label          string      `json:"label"`
	Type           string      `json:"type"`
	Started        metav1.Time `json:"started"`
	Finished       metav1.Time `json:"finished"`
	Size           int64       `json:"size,omitempty"`
	RepositorySize int64       `json:"repositorySize,omitempty"`
	StartLSN       string      `json:"startLSN,omitempty"`
	StopLSN        string      `json:"stopLSN,omitempty"`
	StartWAL       string      `json:"startWAL,omitempty"`
	StopWAL        string      `json:"stopWAL,omitempty"`
}

// VerifyCommand is the manager's subcommand that verifies the newest base
// backup of $DBKEEPER_REPOSITORY in a throwaway pod (the backup
// controller's verification Job): see internal/agent's Verify.
const VerifyCommand = "verify-backup"

// VerifyReport is what a verification found; the verification pod writes
// it, as JSON, to its termination message, where the backup controller
// reads it.
type VerifyReport struct {
	// Backup is the label of the base backup restored.
	Backup string `json:"backup,omitempty"`
	// ReplayedLSN is the last WAL record replayed, the end of the archive
	// the verification found.
	ReplayedLSN string `json:"replayedLSN,omitempty"`
	// LatestCommit is the commit time of the last transaction replayed.
	LatestCommit *metav1.Time `json:"latestCommit,omitempty"`
	// Database is the database whose rows were counted.
	Database string `json:"database,omitempty"`
	// Tables and Rows count the ordinary tables of Database outside the
	// system schemas, and their rows (exactly).
	Tables int   `json:"tables"`
	Rows   int64 `json:"rows"`
	// Duration is how long the verification took.
	Duration metav1.Duration `json:"duration"`
	// Error says what failed: the restore (a corrupted file in the store),
	// the server's start or replay, or pg_amcheck's findings. Empty when
	// the backup restored, replayed to consistency and checked clean.
	Error string `json:"error,omitempty"`
}
