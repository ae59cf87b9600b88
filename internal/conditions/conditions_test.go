package conditions

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

func TestEventType(t *testing.T) {
	assert.Equal(t, corev1.EventTypeWarning, EventType(False(dbv1.ConditionBackupReady, dbv1.ReasonApplyFailed, "")))
	assert.Equal(t, corev1.EventTypeNormal, EventType(False(dbv1.ConditionStatefulSetReady, dbv1.ReasonProgressing, "")),
		"a rollout step is not a warning")
	assert.Equal(t, corev1.EventTypeNormal, EventType(True(dbv1.ConditionReady, dbv1.ReasonReady, "")))
	assert.Equal(t, corev1.EventTypeNormal, EventType(Unknown(dbv1.ConditionReady, dbv1.ReasonReconciling, "")))
}

// TestStatusLeavesExtraAlone: the replication controller writes a
// failover's start with its status fields, then returns the same fields
// to the facet framework, which writes them again with the condition. A
// second Status with the same extra carried the condition twice, and the
// API server refused it (".status.conditions: duplicate entries for key
// [type=\"ReplicationReady\"]", a failed reconcile in every failover).
func TestStatusLeavesExtraAlone(t *testing.T) {
	db := &dbv1.Database{}
	extra := dbv1ac.DatabaseStatus().WithObservedGeneration(3)
	cond := metav1.Condition{Type: dbv1.ConditionReplicationReady, Status: metav1.ConditionFalse, Reason: dbv1.ReasonFailingOver, Message: "m"}
	for range 2 {
		desired, _, _ := Status(db, cond, extra, time.Now())
		require.Len(t, desired.Status.Conditions, 1, "one condition per write")
		assert.Equal(t, int64(3), *desired.Status.ObservedGeneration, "extra's fields are carried")
	}
	assert.Empty(t, extra.Conditions, "extra is not changed")
}
