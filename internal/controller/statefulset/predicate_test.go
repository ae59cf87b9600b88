package statefulset

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"sigs.k8s.io/controller-runtime/pkg/event"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// TestPrimaryChangedWakesTheScaleDown: the end of a switchover is a status
// change only; it must reach the statefulset controller, which keeps the
// StatefulSet's replicas above the primary's ordinal until then (found on
// the real node: 3 → 2 with the primary on the last instance switched over
// and then never scaled down).
func TestPrimaryChangedWakesTheScaleDown(t *testing.T) {
	withPrimaries := func(current, target string, phase dbv1.Phase) *dbv1.Database {
		return &dbv1.Database{Status: dbv1.DatabaseStatus{Phase: phase,
			Replication: &dbv1.ReplicationStatus{CurrentPrimary: current, TargetPrimary: target}}}
	}
	p := primaryChanged()
	update := func(o, n *dbv1.Database) bool { return p.Update(event.UpdateEvent{ObjectOld: o, ObjectNew: n}) }
	assert.True(t, update(withPrimaries("db-2", "db-0", ""), withPrimaries("db-0", "db-0", "")), "the current primary moved")
	assert.True(t, update(withPrimaries("db-2", "db-2", ""), withPrimaries("db-2", "db-0", "")), "a switchover began")
	assert.True(t, update(&dbv1.Database{}, withPrimaries("db-0", "db-0", "")), "the first primary")
	assert.False(t, update(withPrimaries("db-0", "db-0", ""), withPrimaries("db-0", "db-0", dbv1.Phase("Ready"))), "another status change")
}
