package replication

import (
	"fmt"
	"strings"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
)

// phase is where a Database's topology stands, as status.replication
// records it and the agents report it. Decide first finds the phase
// (phaseOf), then applies that phase's rules, in their order.
type phase int

// The phases, in the order phaseOf tells them apart: the first that holds
// is the phase.
const (
	// phaseFailingOver: a failover runs (status.replication.lastFailover
	// names the target and has not finished): failover.go.
	phaseFailingOver phase = iota
	// phaseSwitchingOver: targetPrimary differs from currentPrimary:
	// switchover.go, and fallback.go once it is stuck.
	phaseSwitchingOver
	// phaseScaledToZero: spec.replicas is 0.
	phaseScaledToZero
	// phaseSplitBrain: more than one instance claims to be the primary.
	phaseSplitBrain
	// phaseBootstrapping: no primary is recorded yet: bootstrap.go.
	phaseBootstrapping
	// phaseMajorUpgrade: an in-place major upgrade runs: no failover, the
	// primary restarts first (majorupgrade.go).
	phaseMajorUpgrade
	// phasePrimaryLost: the recorded primary is not a healthy primary:
	// waited for, or failed over once it is lost for failoverDelay:
	// lost.go.
	phasePrimaryLost
	// phaseRollingUpdate: the primary serves and instances run an older
	// revision than the StatefulSet's: the steady rules, with the
	// rollout's (rollout.go) before the health report.
	phaseRollingUpdate
	// phaseSteady: the primary serves, every instance on the current
	// revision: steady.go.
	phaseSteady
)

// String is the phase's name, for tests and logs.
func (ph phase) String() string {
	switch ph {
	case phaseFailingOver:
		return "FailingOver"
	case phaseSwitchingOver:
		return "SwitchingOver"
	case phaseScaledToZero:
		return "ScaledToZero"
	case phaseSplitBrain:
		return "SplitBrain"
	case phaseBootstrapping:
		return "Bootstrapping"
	case phaseMajorUpgrade:
		return "MajorUpgrade"
	case phasePrimaryLost:
		return "PrimaryLost"
	case phaseRollingUpdate:
		return "RollingUpdate"
	case phaseSteady:
		return "Steady"
	}
	return fmt.Sprintf("phase(%d)", int(ph))
}

// view is what every rule reads: the input, status.replication as
// recorded (empty when there is none), the instances by name, and those
// that claim to be the primary.
type view struct {
	in        Input
	st        dbv1.ReplicationStatus
	byName    map[string]*Instance
	primaries []string
	// n is spec.replicas.
	n int
}

func newView(in Input) *view {
	v := &view{in: in, byName: map[string]*Instance{}, n: replicas(in.DB)}
	if in.DB.Status.Replication != nil {
		v.st = *in.DB.Status.Replication
	}
	for i := range in.Instances {
		inst := &in.Instances[i]
		v.byName[inst.Name] = inst
		if inst.claimsPrimary() {
			v.primaries = append(v.primaries, inst.Name)
		}
	}
	return v
}

// phaseOf is the phase the Database is in.
func phaseOf(in Input) phase { return newView(in).phase() }

func (v *view) phase() phase {
	st := &v.st
	switch {
	case failingOver(st):
		return phaseFailingOver
	case st.TargetPrimary != "" && st.CurrentPrimary != "" && st.TargetPrimary != st.CurrentPrimary:
		return phaseSwitchingOver
	case v.n == 0:
		return phaseScaledToZero
	case len(v.primaries) > 1:
		return phaseSplitBrain
	case st.CurrentPrimary == "":
		return phaseBootstrapping
	case v.majorUpgrading():
		return phaseMajorUpgrade
	}
	prim := v.byName[st.CurrentPrimary]
	switch {
	case prim == nil || !prim.healthyPrimary() || !prim.claimsPrimary():
		return phasePrimaryLost
	case len(outdated(v.in)) > 0:
		return phaseRollingUpdate
	}
	return phaseSteady
}

// Decide is the next step for the Database from what its pods and their
// agents report: pure, so that any state a manager stopped in leads to
// the same next step.
func Decide(in Input) Plan {
	v := newView(in)
	p := Plan{CurrentPrimary: v.st.CurrentPrimary, TargetPrimary: v.st.TargetPrimary, SwitchoverLSN: v.st.SwitchoverLSN,
		SystemID: v.st.SystemID, LastFailover: v.st.LastFailover.DeepCopy(), Synchronous: v.st.Synchronous.DeepCopy(),
		MajorUpgrade: v.st.MajorUpgrade.DeepCopy()}
	rolledBack(&p, in)
	switch v.phase() {
	case phaseMajorUpgrade:
		decideMajorUpgrade(&p, v)
	case phaseFailingOver:
		decideFailover(&p, v)
	case phaseSwitchingOver:
		decideSwitchover(&p, v)
	case phaseScaledToZero:
		p.Condition = conditions.True(dbv1.ConditionReplicationReady, dbv1.ReasonScaledToZero, "spec.replicas is 0: no instance runs")
	case phaseSplitBrain:
		p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonInstanceUnhealthy, fmt.Sprintf(
			"%s all report being the primary: none is selected by the read-write Service until one is demoted", strings.Join(v.primaries, ", ")))
		p.Changing = true
	case phaseBootstrapping:
		decideBootstrap(&p, v)
	case phasePrimaryLost:
		decidePrimaryLost(&p, v)
	case phaseRollingUpdate:
		decideServing(&p, v, rollingUpdateRules)
	case phaseSteady:
		decideServing(&p, v, steadyRules)
	}
	failedUpgradeCondition(&p, in)
	complete(&p, v)
	return p
}

// complete adds to the plan what every phase's plan has: the system
// identifier once an agent reports it, the transactions a rewind
// discarded, status.replication.instances and the role labels.
func complete(p *Plan, v *view) {
	if p.SystemID == "" {
		for _, inst := range v.in.Instances {
			if inst.Agent != nil && inst.Agent.SystemID != "" {
				p.SystemID = inst.Agent.SystemID
				break
			}
		}
	}
	copyDiscarded(p, v.byName)
	p.Rows = rows(v.in, p.CurrentPrimary)
	p.Labels = labels(v.in, *p, len(v.primaries))
}
