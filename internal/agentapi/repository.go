package agentapi

import "time"

// EnvRepository is the Repository (JSON) this instance archives into and
// takes base backups to, set by the StatefulSet when the Database has
// spec.backup.objectStore (docs/design/backup.md).
const EnvRepository = "DBKEEPER_REPOSITORY"

// Stanza is the pgBackRest stanza of every repository dbkeeper writes:
// each repository path holds one Database, so the stanza needs no name of
// its own.
const Stanza = "db"

// Repository is a pgBackRest repository in an S3-compatible object store.
// The secrets are files (mounted Secrets), read whenever the configuration
// is written, so that a rotated key is used without a restart.
type Repository struct {
	// Endpoint is the store's host[:port]; HTTPS.
	Endpoint string `json:"endpoint"`
	// Bucket holds the repository.
	Bucket string `json:"bucket"`
	// Path is the repository's whole path in the bucket.
	Path string `json:"path"`
	// Region is the store's region.
	Region string `json:"region,omitempty"`
	// URIStyle is "path" or "host".
	URIStyle string `json:"uriStyle,omitempty"`
	// CredentialsDir holds AccessKeyIDFile and SecretAccessKeyFile.
	CredentialsDir string `json:"credentialsDir"`
	// CADir, when set, holds CAFile, which verifies the store.
	CADir string `json:"caDir,omitempty"`
	// CipherDir, when set, holds PassphraseFile: the repository is
	// encrypted (aes-256-cbc).
	CipherDir string `json:"cipherDir,omitempty"`
	// RecoveryWindow is how far back every point stays recoverable: the
	// primary's expiry keeps every backup and WAL segment a point within
	// it needs (internal/agent/expire.go); 7 days when zero.
	RecoveryWindow time.Duration `json:"recoveryWindow,omitempty"`
	// ArchiveTimeout is PostgreSQL's archive_timeout.
	ArchiveTimeout time.Duration `json:"archiveTimeout,omitempty"`
	// Secrets, when set, are the credentials themselves instead of the
	// directories' files: a recovery's source comes in its bootstrap
	// request, read by the operator from Secrets the pod does not mount.
	Secrets *RepositorySecrets `json:"secrets,omitempty"`
}

// RepositorySecrets are an object store's credentials, CA bundle (PEM)
// and the repository's passphrase.
type RepositorySecrets struct {
	AccessKeyID     string `json:"accessKeyId"`
	SecretAccessKey string `json:"secretAccessKey"`
	CA              string `json:"ca,omitempty"`
	Passphrase      string `json:"passphrase,omitempty"`
}

// RecoverySource is what a restore bootstrap recovers: a repository (with
// its Secrets) and the point to stop at.
type RecoverySource struct {
	Repository Repository `json:"repository"`
	// Target is where replay stops; the zero value replays to the end of
	// the archive.
	Target RecoveryTarget `json:"target,omitempty"`
}

// RecoveryTarget is at most one of its fields (see the Database's
// spec.bootstrap.recovery.target).
type RecoveryTarget struct {
	// Time is RFC 3339, fractions of a second allowed.
	Time string `json:"time,omitempty"`
	LSN  string `json:"lsn,omitempty"`
	XID  string `json:"xid,omitempty"`
	Name string `json:"name,omitempty"`
}

// String says what t is, for logs and status.
func (t RecoveryTarget) String() string {
	switch {
	case t.Time != "":
		return "time " + t.Time
	case t.LSN != "":
		return "lsn " + t.LSN
	case t.XID != "":
		return "xid " + t.XID
	case t.Name != "":
		return "restore point " + t.Name
	}
	return "the end of the archive"
}

// BootstrapRestore fills the empty data directory of the first instance
// from the repository of the request's Recovery (BootstrapRequest.Recovery,
// a RecoverySource: pgbackrest restore of the newest base backup before
// its Target) and starts the server in targeted recovery: it replays
// archived WAL up to the target, accepts no connection meanwhile
// (hot_standby=off), and is promoted at the target.
const BootstrapRestore BootstrapMode = "restore"
