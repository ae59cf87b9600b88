package replication

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
)

// An in-place major upgrade (docs/design/major-upgrades.md): spec.version
// raised, the StatefulSet's template runs the new major and carries the
// upgrade (Input.UpgradeFrom). The primary restarts first, with no
// switchover (no standby could take over: none runs the new major) and
// no failover while it runs pg_upgrade (a standby of the old major
// promoted meanwhile would end the upgrade with the old major); once its
// agent reports the new major, the outdated standbys restart, each
// emptied and cloned from it again (their agents see the primary's major),
// and the Database's system identifier becomes the upgraded primary's
// (pg_upgrade makes a new cluster). A failed upgrade leaves every
// instance on the old major, its data as it was: the rolling update then
// goes on as usual, and spec.version may go back (the CRD allows only
// that after a failure).

// majorUpgrading says an in-place major upgrade runs (recorded) or starts
// now: the template carries one to the major it runs, and the recorded
// primary's data directory is still of the old major.
func (v *view) majorUpgrading() bool {
	in := v.in
	if in.UpgradeFrom == "" || in.EngineVersion == "" || v.st.CurrentPrimary == "" {
		return false
	}
	prim := v.byName[v.st.CurrentPrimary]
	if mu := v.st.MajorUpgrade; mu != nil && mu.To == in.EngineVersion && mu.Phase != dbv1.MajorUpgradeRolledBack {
		// a failed upgrade whose primary upgraded after all (a new pod
		// of it tried again) goes on
		return mu.Phase == dbv1.MajorUpgradeRunning ||
			mu.Phase == dbv1.MajorUpgradeFailed && prim != nil && prim.Name == mu.Primary && dataVersionOf(prim) == mu.To
	}
	// not recorded yet: the primary's data is still of the old major, or
	// it upgraded already (a manager killed between the primary's
	// deletion and the record), which its agent's report says
	return prim != nil && (dataVersionOf(prim) == in.UpgradeFrom || upgradedItself(prim, in.UpgradeFrom, in.EngineVersion))
}

// upgradedItself says inst's agent reports that it upgraded its data
// directory from from to to.
func upgradedItself(inst *Instance, from, to string) bool {
	a := inst.lastAnswer()
	if a == nil || a.DataVersion != to || a.MajorUpgrade == nil {
		return false
	}
	r := a.MajorUpgrade
	return r.From == from && r.To == to && r.Phase != agentapi.UpgradeFailed
}

// dataVersionOf is the major of inst's data directory as its agent last
// said, "" when unknown.
func dataVersionOf(inst *Instance) string {
	if a := inst.lastAnswer(); a != nil {
		return a.DataVersion
	}
	return ""
}

// rolledBack marks a failed upgrade rolled back once the template runs
// another major than the one it failed to reach (spec.version went back).
func rolledBack(p *Plan, in Input) {
	mu := p.MajorUpgrade
	if mu == nil || mu.Phase != dbv1.MajorUpgradeFailed || in.EngineVersion == "" || in.EngineVersion == mu.To {
		return
	}
	mu = mu.DeepCopy()
	mu.Phase = dbv1.MajorUpgradeRolledBack
	mu.Message = fmt.Sprintf("spec.version went back to %s after the upgrade to %s failed: %s", in.EngineVersion, mu.To, mu.Message)
	p.MajorUpgrade = mu
}

// decideMajorUpgrade is a step of the running upgrade.
func decideMajorUpgrade(p *Plan, v *view) {
	in := v.in
	mu := p.MajorUpgrade
	if mu == nil || mu.To != in.EngineVersion || mu.Phase == dbv1.MajorUpgradeRolledBack {
		mu = &dbv1.MajorUpgradeStatus{From: in.UpgradeFrom, To: in.EngineVersion, Phase: dbv1.MajorUpgradeRunning,
			Primary: p.CurrentPrimary, StartedAt: metav1.NewTime(in.Now)}
	} else {
		mu = mu.DeepCopy()
		if mu.Phase == dbv1.MajorUpgradeFailed {
			mu.Phase, mu.FinishedAt = dbv1.MajorUpgradeRunning, nil
		}
	}
	p.MajorUpgrade = mu
	p.TargetPrimary = p.CurrentPrimary
	p.Changing = true
	what := fmt.Sprintf("upgrading PostgreSQL %s to %s in place", mu.From, mu.To)
	prim := v.byName[mu.Primary]
	upgraded := false
	if prim != nil && prim.Agent != nil {
		if r := prim.Agent.MajorUpgrade; r != nil && r.From == mu.From && r.To == mu.To {
			switch r.Phase {
			case agentapi.UpgradeFailed:
				now := metav1.NewTime(in.Now)
				mu.Phase, mu.Message, mu.FinishedAt = dbv1.MajorUpgradeFailed, r.Message, &now
				p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonMajorUpgradeFailed, failedMessage(mu))
				return
			case agentapi.UpgradeAnalyzing, agentapi.UpgradeSucceeded:
				upgraded = prim.Agent.DataVersion == mu.To && prim.Agent.State == agentapi.StateRunning
			}
		}
	}
	if prim != nil && prim.Exists && !prim.Terminating && !in.runsTemplate(prim) {
		p.Action = Action{Kind: ActDeletePod, Pod: prim.Name, Why: fmt.Sprintf("restart on PostgreSQL %s's image to upgrade its data directory in place (pg_upgrade)", mu.To)}
		p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonMajorUpgrade, fmt.Sprintf(
			"%s: restarting the primary %s first (no failover until it is done)", what, prim.Name))
		return
	}
	if !upgraded {
		msg := "waiting for its agent"
		if prim != nil && prim.Agent != nil && prim.Agent.Message != "" {
			msg = prim.Agent.Message
		}
		p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonMajorUpgrade, fmt.Sprintf("%s on the primary %s (no failover until it is done): %s", what, mu.Primary, msg))
		return
	}
	if prim.Agent.SystemID != "" {
		p.SystemID = prim.Agent.SystemID // pg_upgrade made a new cluster
	}
	for _, inst := range outdated(in) {
		if inst.Name == prim.Name || inst.Terminating {
			continue
		}
		p.Action = Action{Kind: ActDeletePod, Pod: inst.Name, Why: fmt.Sprintf("clone it again from the primary upgraded to PostgreSQL %s", mu.To)}
		p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonMajorUpgrade, fmt.Sprintf(
			"%s: the primary %s runs %s; restarting standby %s to clone it again", what, prim.Name, mu.To, inst.Name))
		return
	}
	now := metav1.NewTime(in.Now)
	mu.Phase, mu.FinishedAt = dbv1.MajorUpgradeSucceeded, &now
	mu.Message = fmt.Sprintf("the primary %s runs PostgreSQL %s (pg_upgrade --link); the standbys are cloned from it again", prim.Name, mu.To)
	if r := prim.Agent.MajorUpgrade; r != nil && r.Message != "" {
		mu.Message += "; " + r.Message
	}
	p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonMajorUpgrade, what+": done on the primary "+prim.Name+", the standbys are cloned again")
}

// failedUpgradeCondition keeps saying a failed upgrade while the template
// still asks for its major: the usual rules decide the steps (the
// standbys follow the template on the old major's programs), but a
// ReplicationReady they would make True says why the Database is not on
// spec.version.
func failedUpgradeCondition(p *Plan, in Input) {
	mu := p.MajorUpgrade
	if mu == nil || mu.Phase != dbv1.MajorUpgradeFailed || in.EngineVersion != mu.To || p.Condition.Status != metav1.ConditionTrue {
		return
	}
	p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonMajorUpgradeFailed, failedMessage(mu))
}

// failedMessage is what ReplicationReady says of a failed upgrade.
func failedMessage(mu *dbv1.MajorUpgradeStatus) string {
	return fmt.Sprintf("the upgrade of PostgreSQL %s to %s failed on %s, whose data directory is as it was: every instance serves PostgreSQL %s. %s. Fix the cause, then set spec.version back to %s and to %s again to retry",
		mu.From, mu.To, mu.Primary, mu.From, mu.Message, mu.From, mu.To)
}
