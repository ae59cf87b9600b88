package backup

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
)

// TestRecoveryProgressQuotesTheServersExit: a recovery whose server
// exited before its target (the agent stays up, Failed, and starts it
// again later) is BackupReady=False RecoveryFailed with PostgreSQL's line
// and what to check, the whole of the agent's message; while the server
// replays again (Starting) it is Recovering, and still says how the last
// run ended.
func TestRecoveryProgressQuotesTheServersExit(t *testing.T) {
	db := facettest.Database()
	db.Spec.Bootstrap = &dbv1.BootstrapSpec{Recovery: &dbv1.BootstrapRecovery{Database: "ledger",
		Target: &dbv1.RecoveryTarget{Time: "2030-01-01T00:00:00Z"}}}
	now := time.Now()
	view := func(state agentapi.State, msg string) ArchiveView {
		return ArchiveView{Primary: "orders-0", Unreachable: "orders-0 is " + string(state) + " (primary)",
			Status: &agentapi.Status{Pod: "orders-0", State: state, Role: agentapi.RolePrimary, Recovering: true, Message: msg}}
	}

	// the agent's message (recoveryExited)
	failed := "the server exited during the recovery (exit status 1): FATAL:  recovery ended before configured recovery target was reached; " +
		"the target may lie past the end of the archive (check spec.bootstrap.recovery.target), or the store could not be read; starting it again in 20s"
	cond, done := recoveryProgress(db, view(agentapi.StateFailed, failed), now)
	assert.False(t, done)
	assert.Equal(t, dbv1.ConditionBackupReady, cond.Type)
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Equal(t, dbv1.ReasonRecoveryFailed, cond.Reason)
	assert.Contains(t, cond.Message, "recovering to time 2030-01-01T00:00:00Z failed on orders-0")
	assert.Contains(t, cond.Message, "FATAL: recovery ended before configured recovery target was reached")
	assert.Contains(t, cond.Message, "check spec.bootstrap.recovery.target")
	assert.Contains(t, cond.Message, "starting it again in 20s", "the message was cut")

	cond, done = recoveryProgress(db, view(agentapi.StateStarting,
		"replaying the archive again; the last run ended with: FATAL: recovery ended before configured recovery target was reached"), now)
	assert.False(t, done)
	assert.Equal(t, dbv1.ReasonRecovering, cond.Reason)
	assert.Contains(t, cond.Message, "the last run ended with: FATAL: recovery ended before configured recovery target was reached")
}
