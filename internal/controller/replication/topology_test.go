package replication

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
)

func primaryAt(name, lsn string) *agentapi.Status {
	return &agentapi.Status{Pod: name, State: agentapi.StateRunning, Role: agentapi.RolePrimary, Ready: true, SystemID: "7", Timeline: 1, CurrentLSN: lsn}
}

func standbyAt(name, lsn string) *agentapi.Status {
	return &agentapi.Status{Pod: name, State: agentapi.StateRunning, Role: agentapi.RoleReplica, Ready: true, SystemID: "7", Timeline: 1,
		ReceivedLSN: lsn, ReplayedLSN: lsn, WALReceiver: "streaming"}
}

func inst(ord int, a *agentapi.Status, err string) Instance {
	return Instance{Name: "orders-" + string(rune('0'+ord)), Ordinal: ord, Exists: true, PodReady: true, Revision: "r1", Agent: a, Err: err}
}

// TestDecide: the decisions that do not need a client.
func TestDecide(t *testing.T) {
	withPrimary := func(cur, tgt, lsn string) *dbv1.Database {
		db := facettest.Database()
		db.Spec.Replicas = ptr.To[int32](3)
		db.Status.Replication = &dbv1.ReplicationStatus{CurrentPrimary: cur, TargetPrimary: tgt, SwitchoverLSN: lsn}
		return db
	}
	for name, tc := range map[string]struct {
		db     *dbv1.Database
		insts  []Instance
		action ActionKind
		pod    string
		reason string
		labels map[string]string
	}{
		"two primaries: neither is labelled": {
			db:     withPrimary("orders-0", "orders-0", ""),
			insts:  []Instance{inst(0, primaryAt("orders-0", "0/10"), ""), inst(1, primaryAt("orders-1", "0/10"), ""), inst(2, standbyAt("orders-2", "0/10"), "")},
			reason: dbv1.ReasonInstanceUnhealthy,
			labels: map[string]string{"orders-0": "", "orders-1": "", "orders-2": ""},
		},
		"bootstrap waits for an agent that does not answer": {
			db:     withPrimary("", "", ""),
			insts:  []Instance{inst(0, &agentapi.Status{State: agentapi.StateWaiting, DataEmpty: true}, ""), inst(1, nil, "connection refused"), inst(2, nil, "")},
			reason: dbv1.ReasonBootstrapping,
		},
		"bootstrap initdb on instance 0 only": {
			db: withPrimary("", "", ""),
			insts: []Instance{inst(0, &agentapi.Status{State: agentapi.StateWaiting, DataEmpty: true}, ""),
				inst(1, &agentapi.Status{State: agentapi.StateWaiting, DataEmpty: true}, ""), inst(2, &agentapi.Status{State: agentapi.StateWaiting, DataEmpty: true}, "")},
			action: ActBootstrapInitdb, pod: "orders-0", reason: dbv1.ReasonBootstrapping,
		},
		"a primary found is recorded": {
			db:     withPrimary("", "", ""),
			insts:  []Instance{inst(0, standbyAt("orders-0", "0/10"), ""), inst(1, primaryAt("orders-1", "0/10"), ""), inst(2, nil, "")},
			reason: dbv1.ReasonBootstrapping,
			labels: map[string]string{"orders-0": "replica", "orders-1": "primary", "orders-2": ""},
		},
		"switchover: the old primary leaves the Service before the demote, the target <name>-ro": {
			db:     withPrimary("orders-0", "orders-1", ""),
			insts:  []Instance{inst(0, primaryAt("orders-0", "0/20"), ""), inst(1, standbyAt("orders-1", "0/20"), ""), inst(2, standbyAt("orders-2", "0/20"), "")},
			action: ActDemote, pod: "orders-0", reason: dbv1.ReasonSwitchingOver,
			labels: map[string]string{"orders-0": "", "orders-1": "", "orders-2": "replica"},
		},
		"switchover: no promote before the target replayed the shutdown LSN": {
			db:     withPrimary("orders-0", "orders-1", "0/30"),
			insts:  []Instance{inst(0, standbyAt("orders-0", "0/30"), ""), inst(1, standbyAt("orders-1", "0/28"), ""), inst(2, standbyAt("orders-2", "0/30"), "")},
			reason: dbv1.ReasonSwitchingOver,
		},
		"switchover: promote once it did": {
			db:     withPrimary("orders-0", "orders-1", "0/30"),
			insts:  []Instance{inst(0, standbyAt("orders-0", "0/30"), ""), inst(1, standbyAt("orders-1", "0/30"), ""), inst(2, standbyAt("orders-2", "0/30"), "")},
			action: ActPromote, pod: "orders-1", reason: dbv1.ReasonSwitchingOver,
		},
		"switchover: a demote in progress is waited for, not abandoned": {
			db: withPrimary("orders-0", "orders-1", ""),
			insts: []Instance{inst(0, &agentapi.Status{State: agentapi.StateDemoting, Role: agentapi.RolePrimary}, ""),
				inst(1, &agentapi.Status{State: agentapi.StateRunning, Role: agentapi.RoleReplica, Ready: true, ReplayedLSN: "0/30"}, ""), inst(2, nil, "")},
			reason: dbv1.ReasonSwitchingOver,
			labels: map[string]string{"orders-0": "", "orders-1": "", "orders-2": ""},
		},
	} {
		t.Run(name, func(t *testing.T) {
			p := Decide(Input{DB: tc.db, Instances: tc.insts, UpdateRevision: "r1"})
			assert.Equal(t, tc.action, p.Action.Kind, p.Condition.Message)
			if tc.pod != "" {
				assert.Equal(t, tc.pod, p.Action.Pod)
			}
			assert.Equal(t, tc.reason, p.Condition.Reason, p.Condition.Message)
			for pod, role := range tc.labels {
				assert.Equal(t, role, p.Labels[pod], "label of %s", pod)
			}
			assert.Len(t, p.Rows, len(tc.insts))
		})
	}
}

// TestUnreachableRow: an agent that does not answer is Unreachable.
func TestUnreachableRow(t *testing.T) {
	db := facettest.Database()
	p := Decide(Input{DB: db, Instances: []Instance{inst(0, nil, "dial tcp: connection refused")}})
	assert.Equal(t, StateUnreachable, p.Rows[0].State)
	assert.Contains(t, p.Rows[0].Message, "connection refused")
	assert.Equal(t, "", p.Labels["orders-0"])
	assert.Equal(t, ActNone, p.Action.Kind)
}

// A full data volume is said in the condition, naming the instance and
// what to do; the primary keeps its role and label (a failover would not
// help).
func TestDecideSaysTheVolumeIsFull(t *testing.T) {
	db := facettest.Database()
	db.Spec.Replicas = ptr.To[int32](2)
	db.Status.Replication = &dbv1.ReplicationStatus{CurrentPrimary: "orders-0", TargetPrimary: "orders-0"}
	full := primaryAt("orders-0", "0/10")
	full.VolumeFull, full.VolumeAvailableBytes = true, 8192
	p := Decide(Input{DB: db, Now: time.Now(), Instances: []Instance{inst(0, full, ""), inst(1, standbyAt("orders-1", "0/10"), "")}})
	assert.Equal(t, metav1.ConditionFalse, p.Condition.Status)
	assert.Equal(t, dbv1.ReasonInstanceUnhealthy, p.Condition.Reason)
	assert.Contains(t, p.Condition.Message, "data volume of the primary orders-0 is full (8192 bytes free)")
	assert.Contains(t, p.Condition.Message, "spec.storage.size")
	assert.Equal(t, ActNone, p.Action.Kind)
	assert.Equal(t, "orders-0", p.CurrentPrimary)
	assert.Equal(t, dbv1.RolePrimary, p.Labels["orders-0"])
}
