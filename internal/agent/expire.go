package agent

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// The recovery window is enforced by the primary's agent, not by
// pgBackRest's own time retention (which counts whole days): the
// configuration has no retention option, so the expire at the end of each
// `pgbackrest backup` removes nothing, and the agent runs
// `pgbackrest expire` with a count of full backups it computes from
// `pgbackrest info` (fullsToKeep). Archive retention follows the full
// count: WAL older than the oldest kept full backup's start goes, WAL
// between kept backups stays.

// expireEvery is how often the primary expires when nothing asks for it
// sooner (a base backup that finished, a full backup that left the
// window).
const expireEvery = 10 * time.Minute

// defaultRecoveryWindow is the recovery window of a Repository without
// one.
const defaultRecoveryWindow = 7 * 24 * time.Hour

// fullsToKeep is how many of the newest full backups an expiry at now
// keeps so that every point of the recovery window [now-window, now]
// still restores: every full backup that stopped after the window's
// start W, and the newest one that stopped at or before W (a point just
// after W restores from it); when none stopped at or before W, all of
// them. fulls is how many full backups there are. Differential and
// incremental backups depend on their full backup and go with it: they
// are not counted.
//
// pgBackRest's stop times are whole seconds, and a time-targeted restore
// takes a backup only when it stopped before the target's second, so a
// backup stopped at or before W when the second it stopped in ended by
// W: stop + 1s <= W.
func fullsToKeep(backups []agentapi.BaseBackup, window time.Duration, now time.Time) (keep, fulls int) {
	start := now.Add(-window)
	before := false
	for _, b := range backups {
		if b.Type != "full" {
			continue
		}
		fulls++
		if b.Finished.Add(time.Second).After(start) {
			keep++
		} else {
			before = true
		}
	}
	if before {
		keep++
	}
	return keep, fulls
}

// expireDue says whether an expiry should run now, after the last one at
// last (zero: none yet) that failed with lastErr: at once when a base
// backup finished since, or when a full backup left the window (keep <
// fulls) and the last one did not fail; otherwise every expireEvery.
func expireDue(now, last time.Time, lastErr string, backupFinished *metav1.Time, keep, fulls int) bool {
	switch {
	case last.IsZero() || now.Sub(last) >= expireEvery:
		return true
	case backupFinished != nil && backupFinished.After(last):
		return true
	}
	return keep < fulls && lastErr == ""
}

// maybeExpire expires the repository when it is due (expireDue, judged
// on info, just read): never without a full backup, never while a base
// backup runs, never twice at once. The count it keeps comes from a new
// read of `pgbackrest info` taken once no base backup can start: a full
// backup that finished meanwhile, uncounted, would make it keep one too
// few. When it ran, it says so (true) and has published what the
// repository holds after it, with its own outcome, at once.
func (a *Agent) maybeExpire(ctx context.Context, info *repositoryInfo) bool {
	r := a.archive
	select {
	case r.expiring <- struct{}{}:
	default:
		return false // one runs, or a base backup is being started
	}
	defer func() { <-r.expiring }()
	window := r.repo.RecoveryWindow
	if window <= 0 {
		window = defaultRecoveryWindow
	}
	due := func(info *repositoryInfo, now time.Time) (int, bool) {
		keep, fulls := fullsToKeep(info.backups, window, now)
		r.mu.Lock()
		defer r.mu.Unlock()
		var finished *metav1.Time
		if r.run != nil {
			if r.run.Finished == nil {
				return keep, false // pgBackRest's lock would refuse
			}
			if r.run.Error == "" {
				finished = r.run.Finished
			}
		}
		return keep, fulls > 0 && expireDue(now, r.expireTriedAt, r.expireErr, finished, keep, fulls)
	}
	if _, ok := due(info, time.Now()); !ok {
		return false
	}
	before, err := a.readInfo(ctx)
	if err != nil {
		return false // never without knowing what the repository holds
	}
	now := time.Now()
	keep, ok := due(before, now)
	if !ok {
		return false
	}
	out, err := a.pgbackrest(ctx, r.configPath(), pgbackrestTimeout, "expire",
		"--repo1-retention-full-type=count", "--repo1-retention-full="+strconv.Itoa(keep))
	err = expireError(out, err)
	if err != nil && isLockRefusal(err) {
		// another pgBackRest command holds the stanza's lock: later.
		a.log.V(1).Info("Expiry postponed: another pgBackRest command holds the lock", "err", err.Error())
		return false
	}
	after := before
	if err == nil {
		if after, _ = a.readInfo(ctx); after == nil {
			after = before
		}
	}
	prevErr := r.recordExpiry(now, err, before, after)
	if err != nil {
		if err.Error() != prevErr {
			a.log.Error(err, "Cannot expire the backups outside the recovery window", "recoveryWindow", window, "keepFull", keep)
		}
		return true
	}
	a.logExpiry(before, after, window, keep, now)
	return true
}

// recordExpiry notes an expiry tried at now (err: how it failed) and the
// repository as read after it (after; before when that read failed, which
// is then made again at the next tick). It returns the error of the
// expiry before.
func (r *archiver) recordExpiry(now time.Time, err error, before, after *repositoryInfo) (prevErr string) {
	r.mu.Lock()
	r.expireTriedAt = now
	prevErr = r.expireErr
	if err != nil {
		r.expireErr = err.Error()
	} else {
		r.expireErr, r.expiredAt = "", &metav1.Time{Time: now}
	}
	r.info, r.infoErr, r.infoAt = after, "", time.Now()
	r.infoDirty = after == before && err == nil // the read after the expiry failed: again at the next tick
	r.mu.Unlock()
	return prevErr
}

// logExpiry says what an expiry at now, which kept keep full backups of
// window, removed: the backups of before that after lacks, and how the
// start of the archive moved. Without a change it says so only at V(1).
func (a *Agent) logExpiry(before, after *repositoryInfo, window time.Duration, keep int, now time.Time) {
	var removed []string
	for _, b := range before.backups {
		if !slices.ContainsFunc(after.backups, func(k agentapi.BaseBackup) bool { return k.Label == b.Label }) {
			removed = append(removed, b.Label)
		}
	}
	log := a.log.V(1)
	if len(removed) > 0 || after.archiveMin != before.archiveMin {
		log = a.log
	}
	log.Info("Expired the backups outside the recovery window", "recoveryWindow", window,
		"windowStart", now.Add(-window).UTC().Format(time.RFC3339), "keepFull", keep,
		"removedBackups", removed, "archiveMinBefore", before.archiveMin, "archiveMinAfter", after.archiveMin)
}

// expireError is err with the cause pgBackRest's expire gave: it ends
// with a summary ("[104]: expire command encountered 1 error(s)") after
// the repository's own error, which says what failed.
func expireError(out string, err error) error {
	if err == nil {
		return nil
	}
	if i := strings.Index(out, "ERROR: [104]"); i > 0 {
		if msg := lastErrorIn(out[:i]); msg != "" {
			return fmt.Errorf("pgbackrest expire: %s", msg)
		}
	}
	return err
}

// isLockRefusal says whether pgBackRest refused to run because another
// of its commands holds the stanza's lock ([050] LockAcquireError).
func isLockRefusal(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "[050]") || strings.Contains(msg, "unable to acquire lock")
}

// notDuringExpiry runs h (a base backup's start) once no expiry runs, and
// keeps the next from starting meanwhile: pgBackRest's lock would refuse
// a backup while an expire runs, and the backup would count as failed.
func (a *Agent) notDuringExpiry(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		if a.archive != nil {
			select {
			case a.archive.expiring <- struct{}{}:
				defer func() { <-a.archive.expiring }()
			case <-req.Context().Done():
				return
			}
		}
		h(w, req)
	}
}
