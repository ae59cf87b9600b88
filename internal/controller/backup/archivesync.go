package backup

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// How often the archive of a Database is looked at: its status follows
// the primary's archiver within archivePoll (the issue asks a failing
// store to show within a minute), sooner while something runs or fails.
const (
	archivePoll     = 30 * time.Second
	archivePollBusy = 5 * time.Second
	// firstBackupRetry is how long a failed first base backup waits
	// before it is asked again.
	firstBackupRetry = 5 * time.Minute
)

// healthyPoll is how often a healthy archive is looked at: archivePoll, or
// archiveTimeout when a Database asks for a shorter one, so that it sees
// its archive's progress as often.
func healthyPoll(db *dbv1.Database) time.Duration {
	return min(archivePoll, resources.ArchiveTimeout(db))
}

// syncArchive is the backup facet of a Database with a repository (store,
// resources.Store: spec.backup.objectStore or the backup volume's): it reads the primary's archive report, asks
// for base backups (the first one, on schedule, on demand) and reports
// the archive, the backups and a recovery's progress. restoring is the
// condition of a dump restore (spec.bootstrap.fromBackup) that has not
// finished, restoredFrom what it restored.
func (s *syncer) syncArchive(ctx context.Context, db *dbv1.Database, eng engine.Engine, tls resources.ServerTLS, store *dbv1.ObjectStoreSpec,
	restoring *metav1.Condition, restoredFrom string) (facet.Outcome, error) {
	now := s.now()
	prev := db.Status.Backup
	if prev == nil {
		prev = &dbv1.BackupStatus{}
	}
	st := &dbv1.BackupStatus{
		RepositoryPath:          resources.RepositoryPath(db, store),
		LastOnDemandToken:       prev.LastOnDemandToken,
		LastScheduledBaseBackup: prev.LastScheduledBaseBackup,
		Recovery:                prev.Recovery,
		RestoredFrom:            restoredFrom,
	}
	view := s.archiveView(ctx, db)
	view.OnBackupVolume = resources.IsVolumeStore(db, store)
	if restoring != nil {
		keepArchive(st, prev)
		return facet.Outcome{Condition: *restoring, Status: dbv1ac.DatabaseStatus().WithBackup(backupStatusApply(st)), RequeueAfter: archivePollBusy}, nil
	}

	if rec := recoveryPending(db); rec != nil {
		if view.Status == nil || view.Status.State == agentapi.StateWaiting {
			// not started yet: a source that cannot be used says so here,
			// and is looked at again until it can (a consent given later).
			if _, err := facet.RecoveryStore(ctx, s.reader, db); err != nil {
				var refused *resources.RecoveryRefusedError
				if !errors.As(err, &refused) {
					return facet.Outcome{}, err
				}
				keepArchive(st, prev)
				return facet.Outcome{Condition: conditions.False(dbv1.ConditionBackupReady, dbv1.ReasonRecoveryRefused, refused.Error()),
					Status: dbv1ac.DatabaseStatus().WithBackup(backupStatusApply(st)), RequeueAfter: archivePoll}, nil
			}
		}
		cond, done := recoveryProgress(db, view, now)
		if !done {
			keepArchive(st, prev)
			return facet.Outcome{Condition: cond, Status: dbv1ac.DatabaseStatus().WithBackup(backupStatusApply(st)), RequeueAfter: archivePollBusy}, nil
		}
		st.Recovery = recoveryStatus(db, view, now)
		log.FromContext(ctx).Info("Recovery finished", "target", st.Recovery.Target, "replayedLSN", st.Recovery.ReplayedLSN)
	}

	after := healthyPoll(db)
	if view.Report == nil {
		keepArchive(st, prev)
	} else {
		var err error
		if after, err = s.requestBackups(ctx, db, view, st, now); err != nil {
			return facet.Outcome{}, err
		}
		fillArchive(st, prev, view.Report)
		if view.Status != nil {
			st.Archive.VolumeAvailableBytes = int64(view.Status.VolumeAvailableBytes) >> 20 << 20
		}
	}
	verifyAfter, err := s.syncVerification(ctx, db, eng, tls, st, prev, now)
	if err != nil {
		return facet.Outcome{}, err
	}
	if verifyAfter > 0 {
		after = min(after, verifyAfter)
	}
	cond := verificationCondition(AssessArchive(db, view, now), st)
	if cond.Status != metav1.ConditionTrue {
		after = min(after, archivePollBusy)
	}
	return facet.Outcome{Condition: cond, Status: dbv1ac.DatabaseStatus().WithBackup(backupStatusApply(st)), RequeueAfter: after}, nil
}

// archiveView asks the primary's agent (status.replication.currentPrimary,
// else the first instance) for its status.
func (s *syncer) archiveView(ctx context.Context, db *dbv1.Database) ArchiveView {
	v := ArchiveView{}
	size := db.Spec.DataSize()
	v.VolumeBytes = size.Value()
	name := resources.StatefulSetName(db) + "-0"
	if r := db.Status.Replication; r != nil && r.CurrentPrimary != "" {
		name = r.CurrentPrimary
	}
	v.Primary = name
	pod := &corev1.Pod{}
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, pod); err != nil {
		v.Unreachable = fmt.Sprintf("pod %s: %s", name, err)
		return v
	}
	status, err := s.agents.Status(ctx, db, pod)
	if err != nil {
		v.Unreachable = fmt.Sprintf("the agent of %s: %s", name, err)
		return v
	}
	v.Status = &status
	if status.Role == agentapi.RolePrimary && status.Ready {
		v.Report = status.Archive
	} else {
		v.Unreachable = fmt.Sprintf("%s is %s (%s)", name, status.State, status.Role)
	}
	if status.Archive == nil && v.Unreachable == "" {
		v.Unreachable = name + " runs without a repository yet (its pod predates spec.backup.objectStore and is restarted by the rollout)"
	}
	return v
}
