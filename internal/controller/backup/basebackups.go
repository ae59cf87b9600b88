package backup

import (
	"context"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

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
		run, err := s.agents.Backup(ctx, db, pod, agentapi.BackupRequest{ID: id, Type: "full"})
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
func RetryDue(rep *agentapi.ArchiveReport, now time.Time) bool {
	run := rep.Run
	if run == nil || run.Error == "" || run.Finished == nil || now.Sub(run.Finished.Time) <= firstBackupRetry {
		return false
	}
	n := newestBackup(rep)
	return n == nil || n.Finished.Before(run.Finished)
}
