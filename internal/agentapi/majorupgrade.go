package agentapi

// In-place major upgrades (docs/design/major-upgrades.md). When
// spec.version rises, the StatefulSet's template runs the new major's
// image, with an init container of the old major's image that copies its
// server (CopyEngineCommand) into OldEngineDir, and tells the agent both
// majors (EnvUpgradeFrom, EnvUpgradeTo). The agent of the primary, on a
// data directory of the old major, runs pg_upgrade there before it starts
// the server; a standby's agent waits for the primary to run the new
// major and is then cloned from it again.
const (
	// EnvUpgradeFrom is the major the data directory is upgraded from.
	EnvUpgradeFrom = "DBKEEPER_UPGRADE_FROM"
	// EnvUpgradeTo is the image's major, which it is upgraded to.
	EnvUpgradeTo = "DBKEEPER_UPGRADE_TO"
	// OldEngineDir is the emptyDir holding the old major's server: its
	// usr/lib/postgresql/<major>, usr/share/postgresql/<major> and, in
	// libs, every shared library its programs load.
	OldEngineDir = "/dbkeeper/old-engine"
	// CopyEngineCommand is the manager's subcommand the init container
	// runs in the old image: `manager copy-engine MAJOR DIR`.
	CopyEngineCommand = "copy-engine"
)

// UpgradePhase is how far an in-place major upgrade got.
type UpgradePhase string

// The phases of an in-place major upgrade.
const (
	// UpgradeRunning: the checks or pg_upgrade run; Step says which.
	UpgradeRunning UpgradePhase = "Running"
	// UpgradeFailed: a check or pg_upgrade failed; the data directory is
	// as it was and the instance serves the old major from OldEngineDir.
	// Message says what failed.
	UpgradeFailed UpgradePhase = "Failed"
	// UpgradeAnalyzing: the new server runs; statistics are being
	// rebuilt and extensions updated.
	UpgradeAnalyzing UpgradePhase = "Analyzing"
	// UpgradeSucceeded: done; the old major's files are removed.
	UpgradeSucceeded UpgradePhase = "Succeeded"
)

// MajorUpgradeReport is the primary's last in-place major upgrade, kept
// on its data volume.
type MajorUpgradeReport struct {
	From  string       `json:"from"`
	To    string       `json:"to"`
	Phase UpgradePhase `json:"phase"`
	// Step is the step running, or the one that failed.
	Step string `json:"step,omitempty"`
	// Message says why it failed, or what the last step did.
	Message string `json:"message,omitempty"`
	// Method is pg_upgrade's transfer mode: link (hard links, no copy of
	// the data) or copy.
	Method string `json:"method,omitempty"`
	// StartedAt and FinishedAt are RFC 3339 times.
	StartedAt  string `json:"startedAt,omitempty"`
	FinishedAt string `json:"finishedAt,omitempty"`
}
