package v1

// Condition types of a Database. Each facet controller owns exactly one; the
// readiness controller derives Ready from the others.
const (
	// ConditionStatefulSetReady says whether the engine's StatefulSet has all
	// its pods ready at the current revision.
	ConditionStatefulSetReady = "StatefulSetReady"
	// ConditionServiceReady says whether the client and headless Services
	// exist as specified.
	ConditionServiceReady = "ServiceReady"
	// ConditionCredentialsReady says whether the credentials Secret exists
	// and holds a username and a password.
	ConditionCredentialsReady = "CredentialsReady"
	// ConditionBackupReady says whether backups are scheduled and recent.
	ConditionBackupReady = "BackupReady"
	// ConditionTLSReady says whether the server has its certificate and
	// serves the current one (or runs without TLS, and why).
	ConditionTLSReady = "TLSReady"
	// ConditionReplicationReady says whether exactly one instance is the
	// primary, the read-write Service selects it, and every other instance
	// streams from it.
	ConditionReplicationReady = "ReplicationReady"
	// ConditionConfigurationReady says whether every instance runs with
	// spec.postgresql.parameters (or will at its next start).
	ConditionConfigurationReady = "ConfigurationReady"
	// ConditionRolesReady says whether the roles and databases of
	// spec.roles and spec.databases are on the primary as declared.
	ConditionRolesReady = "RolesReady"
	// ConditionExtensionsReady says whether the extensions of
	// spec.postgresql.extensions are in the application's database as
	// declared.
	ConditionExtensionsReady = "ExtensionsReady"
	// ConditionDeleting reports the progress of cleanup; it is present only
	// while the Database is terminating.
	ConditionDeleting = "Deleting"
	// ConditionReady is the summary of the enabled facets.
	ConditionReady = "Ready"
)

// Reasons shared by every facet condition.
const (
	// ReasonControllerDisabled: the facet's controller is switched off with
	// --controllers, so nobody keeps this facet; the condition is Unknown.
	ReasonControllerDisabled = "ControllerDisabled"
	// ReasonPaused: spec.paused is true, so the facet's children are left
	// as they are; the condition is Unknown.
	ReasonPaused = "Paused"
	// ReasonApplyFailed: the API server refused the facet's child object;
	// the message says why.
	ReasonApplyFailed = "ApplyFailed"
	// ReasonNameTaken: an object the facet would write exists under its
	// name and is not this Database's (made by somebody else, or for
	// another Database); dbkeeper leaves it untouched, and the message
	// names it and why.
	ReasonNameTaken = "NameTaken"
)

// Reasons of StatefulSetReady.
const (
	// ReasonStatefulSetReady: every replica is ready at the current revision.
	ReasonStatefulSetReady = "Ready"
	// ReasonProgressing: the StatefulSet is rolling out or its pods are not
	// ready yet.
	ReasonProgressing = "Progressing"
	// ReasonScaledToZero: spec.replicas is 0, so no pod runs; the data is
	// kept.
	ReasonScaledToZero = "ScaledToZero"
	// ReasonReplicasCapped was set, before streaming replication (issue
	// 18), when spec.replicas asked for more than the one instance dbkeeper
	// then ran. No controller sets it any more; it stays so that a stored
	// condition with it still reads as documented.
	ReasonReplicasCapped = "ReplicasCapped"
	// ReasonImagePullFailed: an engine pod cannot pull its image (the
	// kubelet reports ErrImagePull, ImagePullBackOff or InvalidImageName);
	// the message names the pod, the container, the image, the kubelet's
	// reason and message, and spec.image (when it is empty, the image is
	// the manager's catalog image for spec.version, which is immutable, so
	// the message says to set spec.image).
	ReasonImagePullFailed = "ImagePullFailed"
	// ReasonContainerConfigError: the kubelet cannot build an engine
	// container from the pod (CreateContainerConfigError), most often
	// because the credentials Secret or one of its keys is missing; the
	// message carries the kubelet's message and names the Secret and
	// spec.credentials.secretName.
	ReasonContainerConfigError = "ContainerConfigError"
	// ReasonContainerStartFailed: the runtime cannot create or start an
	// engine container (CreateContainerError, RunContainerError, or a last
	// termination with reason StartError): usually an image that is not
	// the engine's or not for the node's platform; the message names the
	// image and spec.image.
	ReasonContainerStartFailed = "ContainerStartFailed"
	// ReasonOutOfMemory: an engine container was killed for exceeding its
	// memory (its last termination is OOMKilled); the message names the
	// pod, the container, its limit and spec.resources.limits.memory.
	ReasonOutOfMemory = "OutOfMemory"
	// ReasonCrashLooping: an engine container keeps exiting; the message
	// names the pod, the container, its last exit code and termination
	// message, and the kubectl logs command that shows why.
	ReasonCrashLooping = "CrashLooping"
	// ReasonUnschedulable: the scheduler finds no node for an engine pod;
	// the message carries the scheduler's and names spec.resources.requests
	// (too little CPU or memory) or spec.storage (a claim that is not
	// bound).
	ReasonUnschedulable = "Unschedulable"
	// ReasonVersionEndOfLife: every replica is ready (the condition is
	// True), but spec.version is past its end of life: the engine's
	// community publishes no more fixes for it, security ones included,
	// and new Databases cannot use it. The message names the day and how
	// to move the data to a supported version.
	ReasonVersionEndOfLife = "VersionEndOfLife"
)

// Reasons of ServiceReady.
const (
	// ReasonServicesReady: the client and headless Services are in place.
	ReasonServicesReady = "Ready"
	// ReasonWaitingForRestore: the Services are in place, but until
	// spec.bootstrap's restore has finished the client Service selects no
	// pod, so no client reaches a half-filled database; the restore Job
	// reaches the server through the headless Service. The condition is
	// True: the facet is as specified, and BackupReady says how the restore
	// goes.
	ReasonWaitingForRestore = "WaitingForRestore"
)

// Reasons of CredentialsReady.
const (
	// ReasonSecretGenerated: dbkeeper generated the credentials Secret (once)
	// and keeps it.
	ReasonSecretGenerated = "Generated"
	// ReasonSecretProvided: the user's Secret named in
	// spec.credentials.secretName exists and holds both keys.
	ReasonSecretProvided = "Provided"
	// ReasonSecretNotFound: the user's Secret does not exist yet.
	ReasonSecretNotFound = "SecretNotFound"
	// ReasonSecretInvalid: the user's Secret lacks the username or password
	// key.
	ReasonSecretInvalid = "SecretInvalid"
	// ReasonSecretNotOptedIn: the user's Secret does not name this
	// Database in its AnnotationCredentialsFor, so dbkeeper does not use
	// it.
	ReasonSecretNotOptedIn = "SecretNotOptedIn"
	// ReasonPasswordRotated: the server did not have the password of the
	// credentials Secret and dbkeeper set it; the message names the
	// Secret's resourceVersion.
	ReasonPasswordRotated = "Rotated"
	// ReasonRotationPending: the server does not have the credentials
	// Secret's password yet (it is new or changed, and dbkeeper has not
	// reached the server); the message says why.
	ReasonRotationPending = "RotationPending"
	// ReasonRotationFailed: the Secret's password or username was refused
	// (empty, a reserved name...) or the server refused the statement;
	// nothing was changed.
	ReasonRotationFailed = "RotationFailed"
	// ReasonLegacySuperuser: the application's role is the server's
	// superuser, as dbkeeper made it before issue 17; its password is kept
	// in line, and the message says how to migrate it.
	ReasonLegacySuperuser = "LegacySuperuser"
)

// Reasons of BackupReady.
const (
	// ReasonBackupScheduled: the backup CronJob is in place and the last
	// backup, if any, succeeded.
	ReasonBackupScheduled = "Scheduled"
	// ReasonBackupSuspended: spec.backup.suspend is true.
	ReasonBackupSuspended = "Suspended"
	// ReasonLastBackupFailed: the most recent backup Job failed; the message
	// names the Job and why.
	ReasonLastBackupFailed = "LastBackupFailed"
	// ReasonRestoring: spec.bootstrap's restore Job has not succeeded yet;
	// the Database is not Ready until it has.
	ReasonRestoring = "Restoring"
	// ReasonRestoreFailed: spec.bootstrap's restore Job failed; the message
	// names it and why.
	ReasonRestoreFailed = "RestoreFailed"
	// ReasonRestoreRefused: spec.bootstrap's restore found the data volume
	// already holding data it did not restore (such as a Retained
	// predecessor's volume) and touched nothing; it is not retried.
	ReasonRestoreRefused = "RestoreRefused"
	// ReasonBackupStale: the last successful backup is older than
	// spec.backup.maxAge, or none succeeded that long after creation.
	ReasonBackupStale = "BackupStale"
	// ReasonBackupPodNotStarting: the pod of a running backup or restore
	// Job cannot start its container (a key or the Secret missing, an
	// image that cannot be pulled); the message names the Job, the pod,
	// the kubelet's reason and its message.
	ReasonBackupPodNotStarting = "BackupPodNotStarting"

	// The reasons of a Database with spec.backup.objectStore (continuous
	// archiving with pgBackRest, docs/design/backup.md).

	// ReasonArchiving: WAL is archived and the newest base backup is
	// recent enough: a point-in-time recovery can reach any point since
	// status.backup.firstRecoverabilityPoint.
	ReasonArchiving = "Archiving"
	// ReasonArchiveStarting (True): the repository is being created or the
	// first base backup runs; nothing is recoverable yet. Ready does not
	// wait for it; past spec.backup.maxAge it turns into BackupStale.
	ReasonArchiveStarting = "ArchiveStarting"
	// ReasonArchiveAccessDenied: the store refused the credentials (a
	// wrong key, secret or a policy that does not allow the path).
	ReasonArchiveAccessDenied = "ArchiveAccessDenied"
	// ReasonArchiveBucketNotFound: the bucket does not exist.
	ReasonArchiveBucketNotFound = "ArchiveBucketNotFound"
	// ReasonArchiveTLSFailed: the store's certificate was not verified
	// (another name, another CA): fix spec.backup.objectStore.endpoint or
	// caSecret.
	ReasonArchiveTLSFailed = "ArchiveTLSFailed"
	// ReasonArchiveUnreachable: the store did not answer (refused, timed
	// out, unknown host).
	ReasonArchiveUnreachable = "ArchiveUnreachable"
	// ReasonArchiveFailing: archiving fails for another reason; the message
	// has pgBackRest's.
	ReasonArchiveFailing = "ArchiveFailing"
	// ReasonWALPilingUp: WAL waiting to be archived takes a growing share
	// of the data volume; when it is full the primary stops. The message
	// says how much and what to do.
	ReasonWALPilingUp = "WALPilingUp"
	// ReasonArchiveStale: nothing was archived for archiveTimeout plus a
	// margin although the primary wrote.
	ReasonArchiveStale = "ArchiveStale"
	// ReasonRepositoryRefused: the repository path already holds another
	// server's archive; dbkeeper writes nothing there. The message names
	// the path.
	ReasonRepositoryRefused = "RepositoryRefused"
	// ReasonBaseBackupFailed: the last base backup failed; the message has
	// pgBackRest's error. Archiving goes on.
	ReasonBaseBackupFailed = "BaseBackupFailed"
	// ReasonRecovering: spec.bootstrap.recovery restores and replays; the
	// message says how far.
	ReasonRecovering = "Recovering"
	// ReasonRecoveryFailed: the recovery failed (no backup before the
	// target, a target past the archive's end); the message has why.
	ReasonRecoveryFailed = "RecoveryFailed"
	// ReasonRecoveryRefused: spec.bootstrap's source cannot be used (it
	// does not exist, has no archive, or does not consent to restores into
	// this namespace: its restore-allowed-namespaces annotation).
	ReasonRecoveryRefused = "RecoveryRefused"
	// ReasonVerificationFailed: the newest verification restore
	// (spec.backup.verification) failed; the message has why (a corrupted
	// file, a replay that stopped, pg_amcheck's findings) and
	// status.backup.lastVerification the rest.
	ReasonVerificationFailed = "VerificationFailed"
)

// Reasons of TLSReady.
const (
	// ReasonTLSReady: the certificate Secret is valid and the server
	// serves its certificate.
	ReasonTLSReady = "Ready"
	// ReasonTLSIssuing: the certificate is being issued (by dbkeeper or
	// cert-manager) or the server has not loaded it yet; the message says
	// which.
	ReasonTLSIssuing = "Issuing"
	// ReasonTLSReloading: the Secret holds a renewed certificate and the
	// server still serves the previous one; dbkeeper asked it to reload its
	// configuration (no restart) and looks again.
	ReasonTLSReloading = "Reloading"
	// ReasonTLSDisabled: spec.tls.mode is Disabled; connections are
	// plaintext. The condition is True.
	ReasonTLSDisabled = "Disabled"
	// ReasonPlaintextKept: the Database was created before dbkeeper had
	// TLS and spec.tls is unset, so its server keeps plaintext (no restart,
	// clients unchanged); the message says how to turn TLS on. The
	// condition is True.
	ReasonPlaintextKept = "PlaintextKept"
	// ReasonCertificateInvalid: the certificate Secret cannot be used (a
	// key missing, not PEM, expired, or not for the Database's host
	// names); the message says what.
	ReasonCertificateInvalid = "CertificateInvalid"
	// ReasonIssuerNotInstalled: spec.tls.issuerRef is set but cert-manager's
	// Certificate kind is not installed in the cluster.
	ReasonIssuerNotInstalled = "CertManagerNotInstalled"
)

// Reasons of Deleting.
const (
	// ReasonCleaningUp: the deletion policy is being carried out.
	ReasonCleaningUp = "CleaningUp"
	// ReasonDeletionBlocked: the deletion policy holds the Database.
	ReasonDeletionBlocked = "DeletionBlocked"
	// ReasonFinalBackupFailed: spec.backup.beforeDelete is set and the
	// final backup Job failed; nothing is deleted until it succeeds.
	ReasonFinalBackupFailed = "FinalBackupFailed"
)

// Reasons of Ready.
const (
	// ReasonReady: every enabled facet is True at the current generation.
	ReasonReady = "Ready"
	// ReasonReconciling: some enabled facet has not reported on the current
	// generation yet.
	ReasonReconciling = "Reconciling"
	// ReasonDeleting: the Database is being deleted.
	ReasonDeleting = "Deleting"
)

// Finalizer is the finalizer of the cleanup controller; it holds a deleted
// Database until its deletion policy has been carried out.
const Finalizer = "database.dbkeeper.io/cleanup"

// AnnotationBackupNow, set on a Database to any new value (a token), makes
// the backup controller run one backup Job from the CronJob's template, once
// per token: `kubectl annotate db orders database.dbkeeper.io/backup-now=$(date +%s) --overwrite`.
const AnnotationBackupNow = "database.dbkeeper.io/backup-now"

// AnnotationRotateCA, set on a Database whose CA is dbkeeper's (no
// spec.tls.issuerRef) to any new value (a token), rotates that CA once per
// token, in two halves of spec.tls.caRotationOverlap: the new CA is
// trusted beside the old one (ca.crt holds both) while the server keeps
// the old CA's certificate; then the server and the client certificates
// come from the new CA while the old one is still trusted; then the old CA
// is dropped: `kubectl annotate db orders database.dbkeeper.io/rotate-ca=$(date +%s) --overwrite`.
// status.tls.caRotation follows it.
const AnnotationRotateCA = "database.dbkeeper.io/rotate-ca"

// AnnotationBackupVerifyNow, set on a Database with an object store to any
// new value (a token), runs one verification restore
// (spec.backup.verification) per token.
const AnnotationBackupVerifyNow = "database.dbkeeper.io/backup-verify-now"

// AnnotationRestoreAllowedNamespaces, on a Database, lists
// (comma-separated, or "*") the namespaces whose Databases may fill
// themselves with its data: recover from its archive
// (spec.bootstrap.recovery) or restore its dumps
// (spec.bootstrap.fromBackup). Its own namespace must be listed too:
// without the annotation, no other Database may.
const AnnotationRestoreAllowedNamespaces = "database.dbkeeper.io/restore-allowed-namespaces"

// AnnotationDemoteAppRole, set to "true" on a Database created before
// dbkeeper separated the application's role from the superuser (its
// CredentialsReady reads LegacySuperuser), makes the secret controller turn
// the application's role into an ordinary owner of its database, keeping
// its password: `kubectl annotate db orders database.dbkeeper.io/demote-app-role=true`.
const AnnotationDemoteAppRole = "database.dbkeeper.io/demote-app-role"

// AnnotationSwitchoverTo, set on a Database to the name of one of its
// instances (pod), asks the replication controller for a planned
// switchover to it; the controller removes the annotation once the
// instance is the primary, or says in ReplicationReady why it cannot.
const AnnotationSwitchoverTo = "database.dbkeeper.io/switchover-to"

// AnnotationCredentialsFor, on a Secret of the user's, lists the Databases
// of its namespace (comma-separated names) that may use it as their
// spec.credentials.secretName: dbkeeper uses a Secret it did not make only
// when the Secret says so, so that writing a Database does not give the use
// of any Secret of the namespace.
const AnnotationCredentialsFor = "database.dbkeeper.io/credentials-for"

// LabelRole is the label of an engine pod that says its role: RolePrimary
// or RoleReplica. The replication controller owns it; the read-write
// Service selects RolePrimary, the read-only Service RoleReplica.
const LabelRole = "database.dbkeeper.io/role"

// The values of LabelRole.
const (
	RolePrimary = "primary"
	RoleReplica = "replica"
)

// Reasons of ReplicationReady.
const (
	// ReasonReplicating: one primary, every standby streams from it.
	ReasonReplicating = "Replicating"
	// ReasonBootstrapping: instances are being created (initdb, clone).
	ReasonBootstrapping = "Bootstrapping"
	// ReasonSwitchingOver: a planned switchover runs (targetPrimary differs
	// from currentPrimary).
	ReasonSwitchingOver = "SwitchingOver"
	// ReasonSwitchoverRefused: the switchover annotation names an
	// instance that cannot be promoted; the message says why.
	ReasonSwitchoverRefused = "SwitchoverRefused"
	// ReasonInstanceUnhealthy: an instance is not ready, not streaming,
	// or its agent does not answer; the message names it.
	ReasonInstanceUnhealthy = "InstanceUnhealthy"
	// ReasonMajorUpgrade: spec.version was raised: the primary upgrades
	// its data directory in place (pg_upgrade) and the standbys are
	// cloned from it again; the message names the step
	// (status.replication.majorUpgrade).
	ReasonMajorUpgrade = "MajorUpgrade"
	// ReasonMajorUpgradeFailed: a check or pg_upgrade refused the
	// in-place major upgrade; every instance serves the old major, its
	// data as it was; the message says what failed.
	ReasonMajorUpgradeFailed = "MajorUpgradeFailed"
	// ReasonRollingUpdate: instances restart one by one on a new pod
	// template, standbys first, the primary last after a switchover.
	ReasonRollingUpdate = "RollingUpdate"
	// ReasonPrimaryLost: the primary is lost (status.replication.
	// primaryLostSince); a failover starts once
	// spec.highAvailability.failoverDelay has passed.
	ReasonPrimaryLost = "PrimaryLost"
	// ReasonFailoverRefused: the primary is lost and no standby is
	// promoted; the message says why and which field decides it.
	ReasonFailoverRefused = "FailoverRefused"
	// ReasonFailingOver: a standby is being promoted in the lost primary's
	// place (status.replication.lastFailover).
	ReasonFailingOver = "FailingOver"
)

// Reasons of ConfigurationReady.
const (
	// ReasonParametersApplied: every instance runs with
	// spec.postgresql.parameters.
	ReasonParametersApplied = "Applied"
	// ReasonRestartPending: every instance has written the parameters,
	// and those that need a restart wait for the rollout (standbys, one
	// switchover, the former primary); status.configuration.pendingRestart
	// lists them.
	ReasonRestartPending = "RestartPending"
	// ReasonParameterRefused: PostgreSQL refused a parameter of
	// spec.postgresql.parameters (its name or value); the message names it
	// with PostgreSQL's message. The others are applied, the refused one
	// is left as it was.
	ReasonParameterRefused = "ParameterRefused"
	// ReasonInstancesUnreachable: an instance's agent did not answer, so
	// the parameters could not be applied there yet; retried.
	ReasonInstancesUnreachable = "InstancesUnreachable"
)

// Reasons of RolesReady.
const (
	// ReasonRolesReconciled: every role and database of spec.roles and
	// spec.databases is on the primary as declared (or there are none).
	ReasonRolesReconciled = "Reconciled"
	// ReasonRoleRefused: a role of spec.roles cannot be kept as declared:
	// a privileged attribute (superuser, replication, bypassrls) that
	// this dbkeeper does not allow, the application's own role, or a
	// statement the server refused. The message names the field; the
	// rest of the spec is applied.
	ReasonRoleRefused = "RoleRefused"
	// ReasonDatabaseRefused: a database of spec.databases cannot be kept
	// as declared: the application's own database, an owner that is
	// neither a role of spec.roles nor the application's, or a statement
	// the server refused. The rest of the spec is applied.
	ReasonDatabaseRefused = "DatabaseRefused"
	// ReasonPasswordSecretMissing: the Secret (or its key) a role's
	// passwordSecret names does not exist or holds no usable password;
	// the role keeps the password it has.
	ReasonPasswordSecretMissing = "PasswordSecretMissing"
	// ReasonPasswordSecretNotOptedIn: the Secret a role's passwordSecret
	// names does not list this Database in its AnnotationCredentialsFor,
	// so dbkeeper does not use it; the role keeps the password it has.
	ReasonPasswordSecretNotOptedIn = "PasswordSecretNotOptedIn"
	// ReasonDropRefused: a role or database with ensure Absent was not
	// dropped because that would lose something: a database with
	// sessions connected, a role that owns objects. The message names
	// them; dbkeeper tries again.
	ReasonDropRefused = "DropRefused"
	// ReasonWaitingForPrimary: the primary cannot be reached yet (not
	// running, not ready, no superuser Secret yet); retried.
	ReasonWaitingForPrimary = "WaitingForPrimary"
	// ReasonWaitingForCredentials: a database of spec.databases is owned
	// by the application's role, which the secret controller has not
	// created yet (or whose Secret is not there yet); retried.
	ReasonWaitingForCredentials = "WaitingForCredentials"
)

// Reasons of ExtensionsReady.
const (
	// ReasonExtensionsReconciled: every extension of
	// spec.postgresql.extensions is in the application's database as
	// declared, and every one of spec.databases[].extensions in its
	// database (or there are none).
	ReasonExtensionsReconciled = "Reconciled"
	// ReasonExtensionUnavailable: an extension of
	// spec.postgresql.extensions is not in the image
	// (pg_available_extensions), or not at the version asked for; the
	// others are kept.
	ReasonExtensionUnavailable = "ExtensionUnavailable"
	// ReasonExtensionRefused: PostgreSQL refused to create, update or drop
	// an extension (the message has its words: a missing dependency, an
	// object that depends on an extension to drop); retried.
	ReasonExtensionRefused = "ExtensionRefused"
	// ReasonWaitingForPreload: an extension needs its library in
	// shared_preload_libraries, which the running primary has not loaded
	// yet: the restart that loads it rolls out (ConfigurationReady says
	// how far), and the extension is created after it.
	ReasonWaitingForPreload = "WaitingForPreload"
	// ReasonExtensionsWaitingForDatabase: a database of spec.databases
	// with extensions is not on the server yet (the roles controller
	// creates it: RolesReady); its extensions are created after it.
	ReasonExtensionsWaitingForDatabase = "WaitingForDatabase"
	// ReasonExtensionsWaitingForPrimary: the primary cannot be reached yet
	// (not running, not ready, no superuser Secret or credentials Secret
	// yet); retried.
	ReasonExtensionsWaitingForPrimary = "WaitingForPrimary"
)
