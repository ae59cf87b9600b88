// Package agent is dbkeeper's in-pod instance agent and its client. The
// agent (`manager agent`, the manager binary copied into the engine pod by
// an init container running `manager copy-self`) is PID 1 of the engine
// container: it owns the postmaster, bootstraps an empty data directory
// when the operator says how (initdb for the first primary, pg_basebackup
// for a standby), serves an authenticated status endpoint, and carries out
// the operator's demote and promote. The operator decides; the agent
// enforces (docs/design/replication.md).
package agent

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
}
