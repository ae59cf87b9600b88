package backup

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// recoveryPending is spec.bootstrap.recovery while it has not finished.
func recoveryPending(db *dbv1.Database) *dbv1.BootstrapRecovery {
	if db.Spec.Bootstrap == nil || db.Spec.Bootstrap.Recovery == nil {
		return nil
	}
	if r := db.Status.Backup; r != nil && r.Recovery != nil && r.Recovery.Finished != nil {
		return nil
	}
	return db.Spec.Bootstrap.Recovery
}

// recoveryProgress is BackupReady while the recovery runs, and whether it
// has finished: the first instance runs as a primary, out of recovery.
func recoveryProgress(db *dbv1.Database, v ArchiveView, now time.Time) (metav1.Condition, bool) {
	t := dbv1.ConditionBackupReady
	target := recoveryTarget(db)
	st := v.Status
	if st == nil {
		return conditions.False(t, dbv1.ReasonRecovering, fmt.Sprintf("recovering to %s: waiting for the first instance (%s)", target, v.Unreachable)), false
	}
	if st.State == agentapi.StateRunning && st.Role == agentapi.RolePrimary && !st.Recovering {
		return metav1.Condition{}, true
	}
	if st.State == agentapi.StateFailed || (st.State == agentapi.StateWaiting && st.Message != "") {
		return conditions.False(t, dbv1.ReasonRecoveryFailed, fmt.Sprintf("recovering to %s failed on %s: %s", target, st.Pod, conditions.Quote(st.Message, 300))), false
	}
	msg := fmt.Sprintf("recovering to %s on %s: %s", target, st.Pod, st.State)
	if st.Message != "" {
		msg += " (" + conditions.Quote(st.Message, 200) + ")"
	}
	if st.ReplayedLSN != "" {
		msg += "; replayed up to " + st.ReplayedLSN
	}
	return conditions.False(t, dbv1.ReasonRecovering, msg+"; clients cannot connect until it was promoted"), false
}

// recoveryTarget says where spec.bootstrap.recovery stops.
func recoveryTarget(db *dbv1.Database) string {
	return resources.RecoveryTarget(db).String()
}

// recoveryStatus is status.backup.recovery of a finished recovery.
func recoveryStatus(db *dbv1.Database, v ArchiveView, now time.Time) *dbv1.RecoveryStatus {
	rec := db.Spec.Bootstrap.Recovery
	src := ""
	switch {
	case rec.ObjectStore != nil:
		src = rec.ObjectStore.Bucket + rec.ObjectStore.Path
	case rec.Namespace != "":
		src = "Database " + rec.Namespace + "/" + rec.Database
	default:
		src = "Database " + db.Namespace + "/" + rec.Database
	}
	t := metav1.NewTime(now)
	return &dbv1.RecoveryStatus{Source: src, Target: recoveryTarget(db), Finished: &t, ReplayedLSN: v.Status.CurrentLSN}
}
