// Package replication is the controller of a Database's replication
// topology: it bootstraps the first primary and clones the standbys, keeps
// the replication role, one slot per standby and synchronous_standby_names
// on the primary, labels the pods with their role, runs switchovers and
// OnDelete rollouts, and fails over when the primary has been lost for
// spec.highAvailability.failoverDelay. It owns ReplicationReady and
// status.replication.
//
// Each reconcile (Sync, sync.go) observes the pods and agents into an Input
// (observe.go), calls Decide, and carries out the Plan (record.go, act.go,
// ensuresql.go). Decide (decide.go) is pure: phaseOf names the phase, and
// that phase's rules, in priority order, make one step:
//   - FailingOver: failover.go; the target chosen by choose.go
//   - SwitchingOver: switchover.go; fallback.go once the target is stuck
//   - ScaledToZero, SplitBrain: decide.go
//   - Bootstrapping: bootstrap.go
//   - PrimaryLost: lost.go (wait, refuse, or start a failover)
//   - Steady and RollingUpdate: steady.go, rollout.go
//
// Every plan gets its status rows and role labels from rows.go.
package replication
