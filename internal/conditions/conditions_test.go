package conditions

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

func TestEventType(t *testing.T) {
	assert.Equal(t, corev1.EventTypeWarning, EventType(False(dbv1.ConditionBackupReady, dbv1.ReasonApplyFailed, "")))
	assert.Equal(t, corev1.EventTypeNormal, EventType(False(dbv1.ConditionStatefulSetReady, dbv1.ReasonProgressing, "")),
		"a rollout step is not a warning")
	assert.Equal(t, corev1.EventTypeNormal, EventType(True(dbv1.ConditionReady, dbv1.ReasonReady, "")))
	assert.Equal(t, corev1.EventTypeNormal, EventType(Unknown(dbv1.ConditionReady, dbv1.ReasonReconciling, "")))
}
