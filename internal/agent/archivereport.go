package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// archiveReport is the archiver's report; with stats, the running
// primary's pg_stat_archiver and pg_wal size too.
func (a *Agent) archiveReport(ctx context.Context, primary bool) *agentapi.ArchiveReport {
	r := a.archive
	if r == nil {
		return nil
	}
	r.mu.Lock()
	rep := &agentapi.ArchiveReport{
		Repository:  r.repo.Bucket + r.repo.Path,
		StanzaReady: r.stanzaOK, StanzaError: r.stanzaErr, InfoError: r.infoErr,
	}
	if r.info != nil {
		rep.Backups = append([]agentapi.BaseBackup(nil), r.info.backups...)
		rep.ArchiveMin, rep.ArchiveMax = r.info.archiveMin, r.info.archiveMax
	}
	if r.run != nil {
		run := *r.run
		rep.Run = &run
	}
	rep.ExpiredAt, rep.ExpireError = r.expiredAt, r.expireErr
	r.mu.Unlock()
	if primary {
		if err := a.archiverStats(ctx, rep); err != nil {
			a.log.V(1).Info("Cannot read pg_stat_archiver", "err", err.Error())
		}
		if rep.LastFailedTime != nil && (rep.LastArchivedTime == nil || rep.LastFailedTime.After(rep.LastArchivedTime.Time)) {
			rep.LastFailure = lastError(r.archiveErrorPath())
		}
		rep.WaitingSegments, rep.OldestWaiting = waitingSegments(a.cfg.PGData)
	}
	return rep
}

// waitingSegments counts the segments PostgreSQL marked ready to archive
// and says when the oldest was marked.
func waitingSegments(pgdata string) (int, *metav1.Time) {
	entries, err := os.ReadDir(filepath.Join(pgdata, "pg_wal", "archive_status"))
	if err != nil {
		return 0, nil
	}
	n := 0
	var oldest time.Time
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".ready") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		n++
		if oldest.IsZero() || info.ModTime().Before(oldest) {
			oldest = info.ModTime()
		}
	}
	if n == 0 {
		return 0, nil
	}
	return n, metaTime(&oldest)
}

// archiverSQL reads pg_stat_archiver and the size of pg_wal.
const archiverSQL = `SELECT archived_count, COALESCE(last_archived_wal, ''), last_archived_time,
	failed_count, COALESCE(last_failed_wal, ''), last_failed_time,
	(SELECT COALESCE(sum(size), 0) FROM pg_ls_waldir())::bigint, now()
	FROM pg_stat_archiver`

func (a *Agent) archiverStats(ctx context.Context, rep *agentapi.ArchiveReport) error {
	var archived, failed *time.Time
	var at time.Time
	if err := a.queryRow(ctx, archiverSQL, &rep.ArchivedCount, &rep.LastArchivedWAL, &archived,
		&rep.FailedCount, &rep.LastFailedWAL, &failed, &rep.WALBytes, &at); err != nil {
		return fmt.Errorf("reading pg_stat_archiver: %w", err)
	}
	rep.LastArchivedTime, rep.LastFailedTime = metaTime(archived), metaTime(failed)
	rep.StatsAt = metaTime(&at)
	return nil
}

func metaTime(t *time.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	m := metav1.NewTime(*t)
	return &m
}
