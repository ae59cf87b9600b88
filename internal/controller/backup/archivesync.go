package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agent"
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
		if view.Status == nil || view.Status.State == agent.StateWaiting {
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
	if status.Role == agent.RolePrimary && status.Ready {
		v.Report = status.Archive
	} else {
		v.Unreachable = fmt.Sprintf("%s is %s (%s)", name, status.State, status.Role)
	}
	if status.Archive == nil && v.Unreachable == "" {
		v.Unreachable = name + " runs without a repository yet (its pod predates spec.backup.objectStore and is restarted by the rollout)"
	}
	return v
}

// requestBackups asks the primary for the base backups that are due: an
// on-demand token's, the first one, a scheduled one. A backup that runs
// already makes a due one wait (as a CronJob's Forbid policy). It returns
// when to look again.
func (s *syncer) requestBackups(ctx context.Context, db *dbv1.Database, v ArchiveView, st *dbv1.BackupStatus, now time.Time) (time.Duration, error) {
	rep := v.Report
	after := healthyPoll(db)
	running := rep.Run != nil && rep.Run.Finished == nil
	if running || !rep.StanzaReady {
		return archivePollBusy, nil
	}
	ask := func(id, why string) bool {
		pod := &corev1.Pod{}
		if err := s.client.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: v.Primary}, pod); err != nil {
			return false
		}
		run, err := s.agents.Backup(ctx, db, pod, agent.BackupRequest{ID: id, Type: "full"})
		if err != nil {
			log.FromContext(ctx).Info("Cannot start a base backup yet", "id", id, "pod", klog.KObj(pod), "error", err.Error())
			return false
		}
		log.FromContext(ctx).Info("Started a base backup", "id", id, "why", why, "pod", klog.KObj(pod))
		rep.Run = &run
		after = archivePollBusy
		return true
	}
	if token := db.Annotations[dbv1.AnnotationBackupNow]; token != "" && token != st.LastOnDemandToken {
		if ask("on-demand-"+token, "the backup-now annotation") {
			st.LastOnDemandToken = token
		}
		return after, nil
	}
	if len(rep.Backups) == 0 {
		if rep.Run == nil || (rep.Run.Finished != nil && now.Sub(rep.Run.Finished.Time) > firstBackupRetry) {
			ask(fmt.Sprintf("first-%d", now.Unix()), "the repository has no base backup")
		}
		return archivePollBusy, nil
	}
	if RetryDue(rep, now) {
		ask(fmt.Sprintf("retry-%d", now.Unix()), "the last base backup ("+rep.Run.ID+") failed and none finished since")
		return archivePollBusy, nil
	}
	if db.Spec.Backup.Suspend {
		return after, nil
	}
	sched, err := cron.ParseStandard(db.Spec.Backup.Schedule)
	if err != nil {
		// the schema admits only what a CronJob takes; say it, do not loop.
		log.FromContext(ctx).Error(err, "spec.backup.schedule cannot be parsed: no scheduled base backup")
		return after, nil
	}
	last := db.CreationTimestamp.Time
	if st.LastScheduledBaseBackup != nil {
		last = st.LastScheduledBaseBackup.Time
	}
	if next := sched.Next(last); !now.Before(next) {
		if ask("scheduled-"+next.UTC().Format("20060102T150405Z"), "spec.backup.schedule") {
			t := metav1.NewTime(next)
			st.LastScheduledBaseBackup = &t
		}
	}
	if wait := sched.Next(now).Sub(now) + time.Second; wait < after {
		after = wait
	}
	return after, nil
}

// RetryDue says whether a base backup that failed (a scheduled or an
// on-demand one cut short by a restart, a store that refused it) is asked
// again: once firstBackupRetry has passed since it ended, unless a newer
// backup finished since. Without it, a failed scheduled backup waits for
// the next slot (a day with a daily schedule) with BackupReady False.
func RetryDue(rep *agent.ArchiveReport, now time.Time) bool {
	run := rep.Run
	if run == nil || run.Error == "" || run.Finished == nil || now.Sub(run.Finished.Time) <= firstBackupRetry {
		return false
	}
	n := newestBackup(rep)
	return n == nil || n.Finished.Before(run.Finished)
}

// fillArchive writes rep into st: the archiver's state, the base backups
// and the run that failed last.
func fillArchive(st, prev *dbv1.BackupStatus, rep *agent.ArchiveReport) {
	a := &dbv1.ArchiveStatus{
		LastArchivedWAL: rep.LastArchivedWAL, LastArchivedTime: rep.LastArchivedTime,
		LastFailedWAL: rep.LastFailedWAL, LastFailedTime: rep.LastFailedTime,
		LastFailure: rep.LastFailure,
		// MiB: a status that changes with every byte written is a write
		// per look.
		PendingWALBytes: rep.WALBytes >> 20 << 20,
		LastExpiryTime:  rep.ExpiredAt, ExpiryFailure: rep.ExpireError,
	}
	st.Archive = a
	st.BaseBackups = int32(len(rep.Backups))
	if n := newestBackup(rep); n != nil {
		finished := n.Finished
		st.LastSuccessfulTime = &finished
		b := &dbv1.BaseBackupStatus{Label: n.Label, Type: n.Type, Started: &n.Started, Finished: &finished,
			Size: n.Size, RepositorySize: n.RepositorySize, StartLSN: n.StartLSN, StopLSN: n.StopLSN}
		switch {
		case rep.Run != nil && rep.Run.Error == "" && !n.Started.Before(&rep.Run.Started):
			b.Instance, b.Note = rep.Run.Instance, rep.Run.Note
		case prev.LastBaseBackup != nil && prev.LastBaseBackup.Label == n.Label:
			b.Instance, b.Note = prev.LastBaseBackup.Instance, prev.LastBaseBackup.Note
		}
		st.LastBaseBackup = b
		first := rep.Backups[0].Finished
		st.FirstRecoverabilityPoint = &first
	}
	if run := rep.Run; run != nil && run.Error != "" && run.Finished != nil {
		st.LastFailedTime, st.LastFailureMessage = run.Finished, conditions.Quote(run.Error, maxDetail)
		st.LastFailedJob = run.ID
	} else if prev.LastFailedTime != nil {
		st.LastFailedTime, st.LastFailureMessage, st.LastFailedJob = prev.LastFailedTime, prev.LastFailureMessage, prev.LastFailedJob
	}
}

// keepArchive carries the previous status over while no report says more.
func keepArchive(st, prev *dbv1.BackupStatus) {
	st.Archive, st.LastBaseBackup, st.BaseBackups = prev.Archive, prev.LastBaseBackup, prev.BaseBackups
	st.FirstRecoverabilityPoint, st.LastSuccessfulTime = prev.FirstRecoverabilityPoint, prev.LastSuccessfulTime
	st.LastFailedTime, st.LastFailureMessage, st.LastFailedJob = prev.LastFailedTime, prev.LastFailureMessage, prev.LastFailedJob
}

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
	if st.State == agent.StateRunning && st.Role == agent.RolePrimary && !st.Recovering {
		return metav1.Condition{}, true
	}
	if st.State == agent.StateFailed || (st.State == agent.StateWaiting && st.Message != "") {
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

// backupStatusApply is b as an apply configuration, every field: the
// apply configurations are generated from the API types with the same
// JSON fields, so the JSON of one is the other.
func backupStatusApply(b *dbv1.BackupStatus) *dbv1ac.BackupStatusApplyConfiguration {
	out := dbv1ac.BackupStatus()
	if b == nil {
		return out
	}
	raw, err := json.Marshal(b)
	if err == nil {
		err = json.Unmarshal(raw, out)
	}
	if err != nil {
		// both sides are generated from one type: this cannot fail.
		panic(fmt.Sprintf("converting status.backup: %v", err))
	}
	return out
}
