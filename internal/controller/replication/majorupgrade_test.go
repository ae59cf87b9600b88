package replication

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
)

// TestMajorUpgrade walks an in-place major upgrade of three instances
// through Decide, from what the agents report at each step: the primary
// restarts first (never a switchover, never a failover while it
// upgrades), the standbys only once it runs the new major, the system
// identifier becomes the upgraded cluster's, and the upgrade is recorded
// Succeeded; a failure is recorded with the agent's reason, and a
// spec.version taken back marks it RolledBack.
func TestMajorUpgrade(t *testing.T) {
	db := facettest.Database()
	db.Spec.Replicas = ptr.To[int32](3)
	db.Spec.Version = "18"
	db.Status.Replication = &dbv1.ReplicationStatus{CurrentPrimary: "orders-0", TargetPrimary: "orders-0", SystemID: "7"}
	old := func(s *agentapi.Status) *agentapi.Status { s.DataVersion = "17"; return s }
	insts := []Instance{
		inst(0, old(primaryAt("orders-0", "0/10")), ""),
		inst(1, old(standbyAt("orders-1", "0/10")), ""),
		inst(2, old(standbyAt("orders-2", "0/10")), ""),
	}
	for i := range insts {
		insts[i].Revision = "r17"
	}
	in := Input{DB: db, Instances: insts, UpdateRevision: "r18", EngineVersion: "18", UpgradeFrom: "17", Now: now}

	t.Log("the template carries the upgrade: the primary restarts first")
	p := Decide(in)
	assert.Equal(t, Action{Kind: ActDeletePod, Pod: "orders-0", Why: "restart on PostgreSQL 18's image to upgrade its data directory in place (pg_upgrade)"}, p.Action)
	require.NotNil(t, p.MajorUpgrade)
	assert.Equal(t, dbv1.MajorUpgradeStatus{From: "17", To: "18", Phase: dbv1.MajorUpgradeRunning, Primary: "orders-0", StartedAt: metav1.NewTime(now)}, *p.MajorUpgrade)
	assert.Equal(t, dbv1.ReasonMajorUpgrade, p.Condition.Reason)
	db.Status.Replication.MajorUpgrade = p.MajorUpgrade

	t.Log("the primary upgrades, its agent answering nothing for a while: no failover")
	in.Instances[0] = gone(0)
	in.Now = now.Add(10 * db.Spec.FailoverDelay())
	p = Decide(in)
	assert.Equal(t, ActNone, p.Action.Kind, "no failover while the primary upgrades: %+v", p.Action)
	assert.Equal(t, "orders-0", p.CurrentPrimary)
	assert.Equal(t, dbv1.ReasonMajorUpgrade, p.Condition.Reason)
	in.Instances[0] = inst(0, &agentapi.Status{Pod: "orders-0", State: agentapi.StateStarting, DataVersion: "17", Message: "upgrading PostgreSQL 17 to 18 in place: pg_upgrade --link",
		MajorUpgrade: &agentapi.MajorUpgradeReport{From: "17", To: "18", Phase: agentapi.UpgradeRunning, Step: "pg_upgrade --link"}}, "")
	in.Instances[0].Revision = "r18"
	p = Decide(in)
	assert.Equal(t, ActNone, p.Action.Kind)
	assert.Contains(t, p.Condition.Message, "pg_upgrade --link", "the step is said")

	t.Log("the primary runs 18: the standbys restart to be cloned again; the system identifier is the new cluster's")
	up := primaryAt("orders-0", "0/20")
	up.SystemID, up.DataVersion = "9", "18"
	up.MajorUpgrade = &agentapi.MajorUpgradeReport{From: "17", To: "18", Phase: agentapi.UpgradeAnalyzing}
	in.Instances[0] = inst(0, up, "")
	in.Instances[0].Revision = "r18"
	p = Decide(in)
	assert.Equal(t, ActDeletePod, p.Action.Kind)
	assert.Equal(t, "orders-2", p.Action.Pod)
	assert.Equal(t, "9", p.SystemID)
	in.Instances[2] = inst(2, &agentapi.Status{Pod: "orders-2", State: agentapi.StateWaiting, DataEmpty: true}, "")
	in.Instances[2].Revision = "r18"
	p = Decide(in)
	assert.Equal(t, Action{Kind: ActDeletePod, Pod: "orders-1", Why: "clone it again from the primary upgraded to PostgreSQL 18"}, p.Action)
	in.Instances[1] = inst(1, &agentapi.Status{Pod: "orders-1", State: agentapi.StateWaiting, DataEmpty: true}, "")
	in.Instances[1].Revision = "r18"
	p = Decide(in)
	assert.Equal(t, dbv1.MajorUpgradeSucceeded, p.MajorUpgrade.Phase)
	assert.NotNil(t, p.MajorUpgrade.FinishedAt)
	db.Status.Replication.MajorUpgrade, db.Status.Replication.SystemID = p.MajorUpgrade, p.SystemID

	t.Log("done: the usual rules clone the standbys")
	p = Decide(in)
	assert.Equal(t, ActBootstrapClone, p.Action.Kind)
	assert.Equal(t, dbv1.MajorUpgradeSucceeded, p.MajorUpgrade.Phase)
}

// TestMajorUpgradeFailed: the primary's agent reports the upgrade failed:
// recorded Failed with its reason, no instance deleted; the usual rules
// then serve (the standbys follow the template as in any rollout); the
// template back on the old major marks it RolledBack, and raising it again
// starts a new upgrade.
func TestMajorUpgradeFailed(t *testing.T) {
	db := facettest.Database()
	db.Spec.Replicas = ptr.To[int32](2)
	db.Spec.Version = "17"
	started := metav1.NewTime(now)
	db.Status.Replication = &dbv1.ReplicationStatus{CurrentPrimary: "orders-0", TargetPrimary: "orders-0", SystemID: "7",
		MajorUpgrade: &dbv1.MajorUpgradeStatus{From: "15", To: "17", Phase: dbv1.MajorUpgradeRunning, Primary: "orders-0", StartedAt: started}}
	prim := primaryAt("orders-0", "0/10")
	prim.DataVersion = "15"
	prim.MajorUpgrade = &agentapi.MajorUpgradeReport{From: "15", To: "17", Phase: agentapi.UpgradeFailed, Message: "pg_upgrade --check refused the upgrade: reg* data types"}
	standby := standbyAt("orders-1", "0/10")
	standby.DataVersion = "15"
	insts := []Instance{inst(0, prim, ""), inst(1, standby, "")}
	insts[0].Revision, insts[1].Revision = "r17", "r15"
	in := Input{DB: db, Instances: insts, UpdateRevision: "r17", EngineVersion: "17", UpgradeFrom: "15", Now: now}
	p := Decide(in)
	assert.Equal(t, ActNone, p.Action.Kind)
	assert.Equal(t, dbv1.MajorUpgradeFailed, p.MajorUpgrade.Phase)
	assert.Equal(t, dbv1.ReasonMajorUpgradeFailed, p.Condition.Reason)
	assert.Contains(t, p.Condition.Message, "reg* data types")
	assert.Contains(t, p.Condition.Message, "serves PostgreSQL 15")
	db.Status.Replication.MajorUpgrade = p.MajorUpgrade

	t.Log("after the failure: the usual rollout, standbys first, no upgrade step; the condition still says why")
	p = Decide(in)
	assert.Equal(t, Action{Kind: ActDeletePod, Pod: "orders-1", Why: "rollout to revision r17"}, p.Action)
	assert.Equal(t, dbv1.MajorUpgradeFailed, p.MajorUpgrade.Phase)
	in.Instances[1].Revision = "r17"
	p = Decide(in)
	assert.Equal(t, ActNone, p.Action.Kind, "every instance on the template")
	assert.Equal(t, dbv1.ReasonMajorUpgradeFailed, p.Condition.Reason, "not Replicating: the Database is not on spec.version")
	assert.Contains(t, p.Condition.Message, "reg* data types")

	t.Log("spec.version back to 15: RolledBack")
	in.EngineVersion, in.UpgradeFrom = "15", ""
	p = Decide(in)
	assert.Equal(t, dbv1.MajorUpgradeRolledBack, p.MajorUpgrade.Phase)
	db.Status.Replication.MajorUpgrade = p.MajorUpgrade

	t.Log("17 again: a new upgrade")
	in.EngineVersion, in.UpgradeFrom = "17", "15"
	prim.MajorUpgrade = nil
	p = Decide(in)
	assert.Equal(t, dbv1.MajorUpgradeRunning, p.MajorUpgrade.Phase)
	assert.Equal(t, dbv1.ReasonMajorUpgrade, p.Condition.Reason)
}

// TestMajorUpgradeFailedThenUpgraded: an upgrade recorded Failed whose
// primary runs the new major after all (a new pod of it tried again, or
// the failure was an interrupted agent's) goes on: its standbys are
// cloned again and it ends Succeeded, with the new system identifier.
func TestMajorUpgradeFailedThenUpgraded(t *testing.T) {
	db := facettest.Database()
	db.Spec.Replicas = ptr.To[int32](2)
	db.Spec.Version = "18"
	db.Status.Replication = &dbv1.ReplicationStatus{CurrentPrimary: "orders-0", TargetPrimary: "orders-0", SystemID: "7",
		MajorUpgrade: &dbv1.MajorUpgradeStatus{From: "17", To: "18", Phase: dbv1.MajorUpgradeFailed, Primary: "orders-0", StartedAt: metav1.NewTime(now)}}
	up := primaryAt("orders-0", "0/20")
	up.SystemID, up.DataVersion = "9", "18"
	up.MajorUpgrade = &agentapi.MajorUpgradeReport{From: "17", To: "18", Phase: agentapi.UpgradeSucceeded}
	standby := standbyAt("orders-1", "0/10")
	standby.DataVersion = "17"
	insts := []Instance{inst(0, up, ""), inst(1, standby, "")}
	insts[0].Revision, insts[1].Revision = "r18", "r17"
	p := Decide(Input{DB: db, Instances: insts, UpdateRevision: "r18", EngineVersion: "18", UpgradeFrom: "17", Now: now})
	assert.Equal(t, Action{Kind: ActDeletePod, Pod: "orders-1", Why: "clone it again from the primary upgraded to PostgreSQL 18"}, p.Action)
	assert.Equal(t, dbv1.MajorUpgradeRunning, p.MajorUpgrade.Phase)
	assert.Equal(t, "9", p.SystemID)
}
