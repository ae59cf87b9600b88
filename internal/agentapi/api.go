// Package agentapi is the contract between the manager and the agent that
// runs PostgreSQL in each pod: the HTTP API's types and client, the
// environment, files and ports the pod builders and the agent agree on,
// and LSN parsing.
package agentapi

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Port is the TCP port of the agent's endpoint; PortName names it in the
// container.
const (
	Port     int32 = 8010
	PortName       = "agent"
)

// The paths of the agent's HTTP API. HealthPath and ReadyPath need no
// token (the kubelet probes them); every other path needs the bearer token.
const (
	HealthPath    = "/healthz" // the agent runs (liveness)
	ReadyPath     = "/readyz"  // the server accepts connections (readiness)
	StatusPath    = "/status"
	BootstrapPath = "/bootstrap"
	DemotePath    = "/demote"
	PromotePath   = "/promote"
	// DetachPath stops a standby's WAL receiver (it reconnects to
	// EnvPrimaryHost after wal_retrieve_retry_interval): a failover
	// detaches the standbys from the lost primary before it promotes one,
	// so that a primary that was only frozen cannot, on waking, send them
	// WAL (or have it confirmed) that the new primary never had.
	DetachPath = "/detach"
	// RejoinPath makes a standby that received WAL the new primary's
	// history does not have (its timeline forked before) stop, pg_rewind
	// from EnvPrimaryHost, and stream again; 202, done in the background.
	RejoinPath = "/rejoin"
	// FailsafePath asks a member to confirm that the primary named in the
	// body (a FailsafeRequest), which cannot renew the primary lease
	// because the API server does not answer, may go on serving: 200 and
	// a FailsafeAnswer when it confirms (it then takes no lease and
	// refuses promotes for LeaseDuration), 409 with the reason when not.
	FailsafePath = "/failsafe"
	// RestartPath restarts the server in place, with the role it has (a
	// primary keeps the primary lease throughout): a checkpoint, a fast
	// shutdown, a start; 200 and the Status once it accepts connections
	// again, 409 when it is not a running, ready server, or is a primary
	// whose lease is not held and renewed (one serving in failsafe could
	// not start again before the API server answers). For a parameter
	// that takes effect only at a start when no pod template change will
	// restart the instance (docs/design/parameters.md).
	RestartPath = "/restart"
	// MetricsPath serves the instance's PostgreSQL metrics
	// (dbkeeper_postgres_*) in Prometheus' text format: the manager
	// scrapes it and serves the series again, labelled with the
	// instance's namespace, Database and pod (docs/design/metrics.md).
	MetricsPath = "/metrics"
)

// CustomQueriesDir is where the engine container mounts the ConfigMap of
// spec.monitoring.customQueries, its key as CustomQueriesFile: the
// user-defined metric queries (internal/customqueries), which the agent runs
// as the application's role when a scrape names it.
const (
	CustomQueriesDir  = "/dbkeeper/queries"
	CustomQueriesFile = "queries.yaml"
)

// BinDir is the emptyDir the init container copies the manager binary
// into; Binary is the copy the engine container runs.
const (
	BinDir = "/dbkeeper/bin"
	Binary = BinDir + "/manager"
)

// ReplicationUser is the role standbys stream with: REPLICATION and LOGIN,
// nothing else, with the password of the replication Secret.
const ReplicationUser = "dbkeeper_replication"

// The agent's environment, set by the StatefulSet.
const (
	// EnvPodName is the pod's name (downward API): the instance's name,
	// its application_name and, on the primary, its standbys' slot names.
	EnvPodName = "DBKEEPER_POD_NAME"
	// EnvToken is the bearer token callers of the authenticated paths
	// present (the replication Secret's agent-token key).
	EnvToken = "DBKEEPER_AGENT_TOKEN"
	// EnvReplicationPassword is ReplicationUser's password.
	EnvReplicationPassword = "DBKEEPER_REPLICATION_PASSWORD"
	// EnvPrimaryHost is the host standbys stream from and clone: the
	// read-write Service's DNS name, which follows the primary.
	EnvPrimaryHost = "DBKEEPER_PRIMARY_HOST"
	// EnvTLSDir holds tls.crt, tls.key and ca.crt when the Database has
	// TLS: the endpoint serves that certificate, and streaming verifies
	// the primary with that CA (verify-full). Empty: plaintext.
	EnvTLSDir = "DBKEEPER_TLS_DIR"
	// EnvAPITLSDir holds tls.crt, tls.key and ca.crt for the endpoint
	// alone when the server has no TLS (EnvTLSDir unset: spec.tls.mode
	// Disabled, or plaintext kept): the endpoint serves that certificate
	// and the instances verify each other's with that CA, so the token
	// never travels in clear; PostgreSQL stays plaintext.
	EnvAPITLSDir = "DBKEEPER_API_TLS_DIR"
	// EnvClientCertAuth, "true" with EnvTLSDir, makes the server ask TCP
	// clients for a certificate of the Database's CA (ClientCAFile, else
	// ca.crt) and log in the superuser and ReplicationUser only with one
	// (the agent writes the rules, engine.Postgres.CertAuthHBA); the
	// instances present their client certificate to each other
	// (ClientCertFile, else their own tls.crt).
	EnvClientCertAuth = "DBKEEPER_CLIENT_CERT_AUTH"
	// EnvPeerDomain is the domain of the instances' own DNS names,
	// <headless Service>.<namespace>.svc: the primary reaches a standby's
	// pgBackRest TLS server at <pod>.<EnvPeerDomain>, a name the
	// Database's certificate carries (*.<headless>.<namespace>.svc).
	EnvPeerDomain = "DBKEEPER_PEER_DOMAIN"
)

// BackupServerPort is the port of every instance's pgBackRest TLS server
// (pgBackRest's own default), through which the primary's pgBackRest
// copies a standby's files for a base backup; BackupServerPortName names
// it in the container.
const (
	BackupServerPort     int32 = 8432
	BackupServerPortName       = "pgbackrest"
)

// SlotName is the physical replication slot the primary keeps for the
// standby instance (pod) named pod.
func SlotName(pod string) string {
	b := []byte("dbkeeper_" + pod)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// Role is what an instance is in the replication topology.
type Role string

// The roles. An instance whose server is not running reports the role its
// data directory would start with (standby.signal present or not).
const (
	RolePrimary Role = "primary"
	RoleReplica Role = "replica"
)

// State is what the agent is doing.
type State string

// The states.
const (
	// StateWaiting: the data directory is empty; the agent waits for a
	// Bootstrap request.
	StateWaiting State = "Waiting"
	// StateBootstrapping: initdb or pg_basebackup runs.
	StateBootstrapping State = "Bootstrapping"
	// StateStarting: the server starts (or recovers) and does not accept
	// connections yet.
	StateStarting State = "Starting"
	// StateRunning: the server accepts connections.
	StateRunning State = "Running"
	// StateDemoting: a demote stops the primary and restarts it as a
	// standby.
	StateDemoting State = "Demoting"
	// StatePromoting: a promote runs.
	StatePromoting State = "Promoting"
	// StateFailed: the server exited or a bootstrap failed; Message says
	// why. The agent retries.
	StateFailed State = "Failed"
)

// Status is what GET StatusPath answers: the instance's real state, read
// from the server (or its data directory when it is not running).
type Status struct {
	// Pod is the instance's name.
	Pod string `json:"pod"`
	// State is what the agent is doing.
	State State `json:"state"`
	// Role is the server's role (pg_is_in_recovery), or the role its data
	// directory starts with when it does not run; empty while Waiting.
	Role Role `json:"role,omitempty"`
	// DataEmpty says the data directory holds no cluster yet.
	DataEmpty bool `json:"dataEmpty,omitempty"`
	// SystemID is the cluster's system identifier (pg_control): instances
	// of one Database share it.
	SystemID string `json:"systemID,omitempty"`
	// Timeline is the timeline the server is on.
	Timeline uint32 `json:"timeline,omitempty"`
	// CurrentLSN is the primary's current WAL write position.
	CurrentLSN string `json:"currentLSN,omitempty"`
	// ReceivedLSN and ReplayedLSN are a standby's last WAL position
	// received from the primary and replayed.
	ReceivedLSN string `json:"receivedLSN,omitempty"`
	ReplayedLSN string `json:"replayedLSN,omitempty"`
	// WALReceiver is the standby's WAL receiver status
	// (pg_stat_wal_receiver.status, "streaming" when healthy), empty when
	// none runs.
	WALReceiver string `json:"walReceiver,omitempty"`
	// Ready says the server accepts connections.
	Ready bool `json:"ready"`
	// Message says what went wrong last, empty when nothing did.
	Message string `json:"message,omitempty"`
	// Lease is the primary lease as this agent last read it; nil without
	// one (EnvLeaseName unset).
	Lease *LeaseStatus `json:"lease,omitempty"`
	// VolumeFull says the data volume has less room than a WAL segment
	// and a checkpoint need: a failover would not help, another standby's
	// volume is the same size.
	VolumeFull bool `json:"volumeFull,omitempty"`
	// VolumeAvailableBytes is the data volume's free space.
	VolumeAvailableBytes uint64 `json:"volumeAvailableBytes,omitempty"`
	// LastRewind is this instance's last rejoin as a standby after it had
	// been a primary (with pg_rewind, or without when its WAL was all in
	// the new primary's history: then nothing was discarded and no
	// divergence is named), nil when it never did.
	LastRewind *RewindReport `json:"lastRewind,omitempty"`
	// Archive is the instance's repository and, on the primary, the WAL
	// archiver's state; nil without EnvRepository.
	Archive *ArchiveReport `json:"archive,omitempty"`
	// Recovering says the server replays a restored archive up to its
	// target and accepts no connections until it is promoted.
	Recovering bool `json:"recovering,omitempty"`
	// Agent is the agent's build and API level (nil from an agent built
	// before it reported them).
	Agent *BuildInfo `json:"agent,omitempty"`
	// DataVersion is the major of the data directory (its PG_VERSION),
	// empty while it holds no cluster.
	DataVersion string `json:"dataVersion,omitempty"`
	// MajorUpgrade is this instance's last in-place major upgrade, nil
	// when it never ran one.
	MajorUpgrade *MajorUpgradeReport `json:"majorUpgrade,omitempty"`
}

// BootstrapMode is how an empty data directory is filled.
type BootstrapMode string

// The bootstrap modes.
const (
	// BootstrapInitdb creates a new cluster (the image's entrypoint runs
	// initdb): only for the first primary of a Database.
	BootstrapInitdb BootstrapMode = "initdb"
	// BootstrapClone copies the primary with pg_basebackup, through
	// EnvPrimaryHost as ReplicationUser, and starts a standby.
	BootstrapClone BootstrapMode = "clone"
)

// BootstrapRequest is the body of POST BootstrapPath. The agent answers
// 202 and the new Status; a data directory that is not empty is never
// touched (409).
type BootstrapRequest struct {
	Mode BootstrapMode `json:"mode"`
	// Recovery is what BootstrapRestore recovers.
	Recovery *RecoverySource `json:"recovery,omitempty"`
}

// DemoteResponse is the answer of POST DemotePath: the primary stopped
// accepting writes (fast shutdown: sessions end, every committed
// transaction's WAL is sent to the connected standbys before the
// postmaster exits) and restarts as a standby of EnvPrimaryHost.
type DemoteResponse struct {
	// ShutdownLSN is the position of the shutdown checkpoint, the last WAL
	// the old primary wrote: a standby that replayed up to it has every
	// commit and may be promoted without losing one.
	ShutdownLSN string `json:"shutdownLSN"`
	Status      Status `json:"status"`
}

// PromoteRequest is the body of POST PromotePath.
type PromoteRequest struct {
	// MinReplayedLSN, when set, refuses (409) the promotion of a standby
	// that has not replayed up to it (the old primary's ShutdownLSN).
	MinReplayedLSN string `json:"minReplayedLSN,omitempty"`
	// Failover says the primary is lost: the agent answers 202 at once,
	// then waits (up to LeaseDuration + LeaseRetryPeriod beyond what it
	// has already observed) to take the lease over, stops its WAL
	// receiver and promotes. Its Status says how it goes (Promoting, the
	// lease's Error). Without Failover, promote takes a released lease
	// (a demoted primary releases it) and answers when done.
	Failover bool `json:"failover,omitempty"`
}

// The primary lease (issue 19). One coordination.k8s.io/v1 Lease per
// Database, named by EnvLeaseName in EnvNamespace, says which instance may
// be a primary. Only its holder runs as a primary; a holder that cannot
// renew it within LeaseRenewDeadline fences itself (an immediate shutdown:
// it stops taking writes at once), before anyone may take the lease over:
// a taker must have seen the record unchanged for LeaseDuration on its own
// monotonic clock, and takes it with a resourceVersion-conditional update.
// Every agent reads the lease every LeaseRetryPeriod, standbys too, so a
// taker's clock starts long before it is asked to promote. Rule:
// LeaseDuration > LeaseRenewDeadline > LeaseRetryPeriod (here 6 > 4 > 1): a
// frozen or partitioned primary is replaced about LeaseDuration after its
// last renew (issue 28), and an API server that does not answer for
// LeaseRenewDeadline does not stop a primary its peers confirm (failsafe).
const (
	LeaseDuration      = 6 * time.Second
	LeaseRenewDeadline = 4 * time.Second
	LeaseRetryPeriod   = time.Second
)

// The agent's environment for the lease, set by the StatefulSet; the pod's
// ServiceAccount may get and update that one Lease. Without EnvLeaseName
// the agent holds no lease (a pod built before issue 19).
const (
	EnvNamespace = "DBKEEPER_NAMESPACE"
	EnvLeaseName = "DBKEEPER_LEASE_NAME"
	// EnvPodUID is the pod's UID (downward API): a pod recreated with
	// the same name (a force deletion, a lost node) is another holder
	// than the one before it, whose containers may still run.
	EnvPodUID = "DBKEEPER_POD_UID"
)

// StateFenced: the agent stopped its primary's server because it could not
// renew the lease in time, or found another holder; it restarts the
// instance as a standby (pg_rewind first) once the lease names another
// holder. Message says why.
const StateFenced State = "Fenced"

// LeaseStatus is the lease as the agent last read it.
type LeaseStatus struct {
	// Holder is the holder's pod name, empty when released.
	Holder string `json:"holder,omitempty"`
	// Held says this agent holds it (renewed within LeaseRenewDeadline).
	Held bool `json:"held,omitempty"`
	// UnchangedFor is how long the record has been seen unchanged, in
	// this agent's clock: a takeover needs LeaseDuration.
	UnchangedFor metav1.Duration `json:"unchangedFor,omitempty"`
	// Error is the last error reading or renewing it.
	Error string `json:"error,omitempty"`
	// Failsafe says this agent serves as the primary although its renew
	// deadline passed: the API server does not answer and every other
	// member (AnnotationMembers) confirmed it within the renew deadline.
	Failsafe bool `json:"failsafe,omitempty"`
	// FailsafeSince is when it began to (its renew deadline passed).
	FailsafeSince *metav1.Time `json:"failsafeSince,omitempty"`
	// ConfirmedFailsafeOf names the primary this member confirmed within
	// the last LeaseDuration: until then it takes no lease and refuses
	// promotes.
	ConfirmedFailsafeOf string `json:"confirmedFailsafeOf,omitempty"`
}

// FailsafeRequest is the body of POST FailsafePath: the primary that asks.
type FailsafeRequest struct {
	// Pod is the primary's pod name, the lease's holder.
	Pod string `json:"pod"`
	// HolderUID is its pod's UID (internal/agent's AnnotationHolderUID),
	// empty when unknown.
	HolderUID string `json:"holderUID,omitempty"`
	// ResourceVersion is the lease's resourceVersion it last read or wrote.
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// Members are the lease's members (AnnotationMembers) as it last read
	// them: the instances it asks.
	Members []string `json:"members,omitempty"`
}

// FailsafeAnswer is a member's confirmation (200) of a FailsafeRequest.
type FailsafeAnswer struct {
	// Pod is the member that confirms.
	Pod string `json:"pod"`
	// Reason says what the member's last read of the lease said.
	Reason string `json:"reason,omitempty"`
}

// RewindReport is what a former primary's rejoin did.
type RewindReport struct {
	// At is when pg_rewind finished (or found no rewind required).
	At metav1.Time `json:"at"`
	// DivergedLSN and DivergedTimeline are where the new primary's
	// history left this instance's.
	DivergedLSN      string `json:"divergedLSN,omitempty"`
	DivergedTimeline uint32 `json:"divergedTimeline,omitempty"`
	// EndLSN is where this instance's own WAL ended.
	EndLSN string `json:"endLSN,omitempty"`
	// DiscardedTransactions counts the commit records of this instance's
	// WAL after the divergence: transactions it acknowledged that the new
	// primary never had.
	DiscardedTransactions int64 `json:"discardedTransactions"`
}
