package replication

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
)

// TestPhaseOf: each phase, and which one wins where several hold.
func TestPhaseOf(t *testing.T) {
	recorded := func(cur, tgt string, mutate ...func(*dbv1.Database)) *dbv1.Database {
		db := facettest.Database()
		db.Spec.Replicas = ptr.To[int32](3)
		db.Status.Replication = &dbv1.ReplicationStatus{CurrentPrimary: cur, TargetPrimary: tgt}
		for _, m := range mutate {
			m(db)
		}
		return db
	}
	replicasZero := func(db *dbv1.Database) { db.Spec.Replicas = ptr.To[int32](0) }
	healthy := []Instance{inst(0, primaryAt("orders-0", "0/10"), ""), inst(1, standbyAt("orders-1", "0/10"), ""), inst(2, standbyAt("orders-2", "0/10"), "")}
	twoPrimaries := []Instance{inst(0, primaryAt("orders-0", "0/10"), ""), inst(1, primaryAt("orders-1", "0/10"), ""), inst(2, standbyAt("orders-2", "0/10"), "")}
	outdatedStandby := []Instance{healthy[0], healthy[1], healthy[2]}
	outdatedStandby[2].Revision = "r0"
	waiting := []Instance{inst(0, &agentapi.Status{State: agentapi.StateWaiting, DataEmpty: true}, ""), gone(1), gone(2)}
	for name, tc := range map[string]struct {
		db    *dbv1.Database
		insts []Instance
		want  phase
	}{
		"a failover runs":                      {db: failingOverDB(), insts: healthy, want: phaseFailingOver},
		"a switchover runs":                    {db: recorded("orders-0", "orders-1"), insts: healthy, want: phaseSwitchingOver},
		"a switchover runs, two primaries":     {db: recorded("orders-0", "orders-1"), insts: twoPrimaries, want: phaseSwitchingOver},
		"scaled to zero":                       {db: recorded("orders-0", "orders-0", replicasZero), insts: twoPrimaries, want: phaseScaledToZero},
		"two primaries":                        {db: recorded("orders-0", "orders-0"), insts: twoPrimaries, want: phaseSplitBrain},
		"no primary recorded":                  {db: recorded("", ""), insts: waiting, want: phaseBootstrapping},
		"no status at all":                     {db: facettest.Database(), insts: waiting, want: phaseBootstrapping},
		"the primary's pod is gone":            {db: lostDB(0), insts: []Instance{gone(0), healthy[1], healthy[2]}, want: phasePrimaryLost},
		"the primary's agent does not answer":  {db: lostDB(0), insts: []Instance{inst(0, nil, "timeout"), healthy[1], healthy[2]}, want: phasePrimaryLost},
		"the primary is fenced":                {db: lostDB(time.Second), insts: []Instance{inst(0, &agentapi.Status{Role: agentapi.RolePrimary, State: agentapi.StateFenced}, ""), healthy[1], healthy[2]}, want: phasePrimaryLost},
		"the primary is lost during a rollout": {db: lostDB(0), insts: []Instance{gone(0), outdatedStandby[1], outdatedStandby[2]}, want: phasePrimaryLost},
		"an instance is outdated":              {db: recorded("orders-0", "orders-0"), insts: outdatedStandby, want: phaseRollingUpdate},
		"all serve":                            {db: recorded("orders-0", "orders-0"), insts: healthy, want: phaseSteady},
		"all serve, no target recorded":        {db: recorded("orders-0", ""), insts: healthy, want: phaseSteady},
	} {
		t.Run(name, func(t *testing.T) {
			got := phaseOf(Input{DB: tc.db, Instances: tc.insts, UpdateRevision: "r1", Now: now})
			assert.Equal(t, tc.want, got, "got %s, want %s", got, tc.want)
		})
	}
	assert.Equal(t, phaseSteady, phaseOf(Input{DB: recorded("orders-0", "orders-0"), Instances: outdatedStandby, Now: now}),
		"no update revision: no rollout")
}
