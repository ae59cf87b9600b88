package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// rewindTimeout bounds one pg_rewind, pg_waldump or single-user recovery.
const rewindTimeout = 10 * time.Minute

// maxRewindFailures is how many rejoins in a row may fail in pg_rewind
// (rejoin retries with backoff in between: 2, 4 s) before the agent stops
// rewinding and has the instance cloned again instead (rewindFailed). A
// pg_rewind that failed three times fails for good as a rule: the WAL it
// reads back to the last common checkpoint is gone from this instance
// (recycled by checkpoints after the divergence), or the histories do not
// meet; each retry repeated the same failure for ever.
const maxRewindFailures = 3

// pgRewindError is a run of pg_rewind that failed, with what it printed.
type pgRewindError struct {
	out string
	err error
}

func (e *pgRewindError) Error() string { return e.err.Error() }
func (e *pgRewindError) Unwrap() error { return e.err }

// rewindAndStart makes the stopped former primary a standby of
// PrimaryHost: it completes crash recovery (single-user mode, with the
// server's own settings), finds where the histories diverged, counts the
// transactions its own WAL committed after that, rewinds the data
// directory to the source's history, and starts the server as a standby.
// "no rewind required" skips the rewind. A pg_rewind that fails
// maxRewindFailures times in a row gives way to a new clone
// (rewindFailed).
func (a *Agent) rewindAndStart() error {
	ctx, cancel := context.WithTimeout(a.ctx, rewindTimeout)
	defer cancel()
	if empty, err := isEmpty(a.cfg.PGData); err != nil {
		return err
	} else if empty { // emptied by reclone, which did not get to clear the fence
		return a.reclone("the data directory is empty")
	}
	// single-user mode refuses standby.signal; the fence marker keeps a
	// restart from starting this data directory as a primary meanwhile.
	if err := os.Remove(filepath.Join(a.cfg.PGData, standbyFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", standbyFile, err)
	}
	if err := a.ensureCleanShutdown(ctx); err != nil {
		return err
	}
	out, err := a.pgRewind(ctx, true)
	if err != nil {
		return a.rewindFailed(ctx, nil, err)
	}
	var report *agentapi.RewindReport
	if !strings.Contains(out, "no rewind required") {
		lsn, tli, ok := parseDivergence(out)
		if !ok {
			return fmt.Errorf("pg_rewind --dry-run did not say where the servers diverged: %s", errorLine(out))
		}
		report = &agentapi.RewindReport{DivergedLSN: lsn, DivergedTimeline: tli}
		n, end, err := a.countCommits(ctx, lsn, tli)
		if err != nil {
			return err
		}
		report.DiscardedTransactions, report.EndLSN = n, end
		a.log.Info("Rewinding", "divergedLSN", lsn, "divergedTimeline", tli, "endLSN", end, "discardedTransactions", n)
		missing, err := a.rewindKeepingWAL(ctx, lsn, tli)
		if err != nil {
			return a.rewindFailed(ctx, report, err)
		}
		a.rewindFailures = 0
		if err := a.writeRewindReport(report); err != nil {
			return err
		}
		if missing != "" {
			return a.reclone(fmt.Sprintf("after pg_rewind, recovery needs WAL segment %s, which neither this instance nor %s has any more", missing, a.cfg.PrimaryHost))
		}
	} else {
		a.rewindFailures = 0
		a.log.Info("No rewind required: starting as a standby")
		// its WAL is all in the new primary's history: it discarded
		// nothing, and status says so (a failover's lastFailover waits
		// for this report to say how much its old primary discarded)
		if err := a.writeRewindReport(&agentapi.RewindReport{}); err != nil {
			return err
		}
	}
	if err := writeStandbySignal(a.cfg.PGData); err != nil {
		return err
	}
	if err := a.clearFenced(); err != nil {
		return err
	}
	if err := a.startServer(agentapi.StateStarting); err != nil {
		return err
	}
	if report != nil {
		a.mu.Lock()
		a.message = fmt.Sprintf("rejoined as a standby after pg_rewind: %d transactions after %s on timeline %d discarded",
			report.DiscardedTransactions, report.DivergedLSN, report.DivergedTimeline)
		a.mu.Unlock()
	}
	return nil
}

// rewindFailed counts a rejoin whose pg_rewind failed (err, a
// pgRewindError; any other error is returned as it is, uncounted) while
// another instance certainly ran as the primary (otherPrimary, which says
// why that makes this data directory no only copy; a failure without one,
// such as a source out of reach, restarts the count). At the
// maxRewindFailures-th such failure in a row it gives up rewinding: it
// keeps the rewind report (report, the one rewindAndStart made, else one
// made from what pg_rewind printed of the divergence and this instance's
// own WAL) and empties the data directory to be cloned again (reclone).
// Otherwise it returns err, saying why, and rejoin tries again.
func (a *Agent) rewindFailed(ctx context.Context, report *agentapi.RewindReport, err error) error {
	var rerr *pgRewindError
	if !errors.As(err, &rerr) {
		return err
	}
	primary, why := a.otherPrimary(ctx)
	if primary == "" {
		a.rewindFailures = 0
		return fmt.Errorf("%w (the data directory is kept: %s)", err, why)
	}
	a.rewindFailures++
	n := a.rewindFailures
	if n < maxRewindFailures {
		return fmt.Errorf("%w (pg_rewind failed %d times in a row from the primary %s; at %d this instance is cloned again)", err, n, primary, maxRewindFailures)
	}
	if report == nil {
		report = a.reportFromOutput(ctx, rerr.out)
	}
	if report != nil {
		if werr := a.writeRewindReport(report); werr != nil {
			return fmt.Errorf("%w; %w", err, werr)
		}
		a.log.Info("Giving up pg_rewind: the transactions after the divergence are discarded", "divergedLSN", report.DivergedLSN,
			"divergedTimeline", report.DivergedTimeline, "discardedTransactions", report.DiscardedTransactions)
	} else {
		a.log.Info("Giving up pg_rewind: pg_rewind did not say where the servers diverged, so the transactions discarded are not counted")
	}
	a.rewindFailures = 0
	return a.reclone(fmt.Sprintf("pg_rewind failed %d times in a row (%s) and %s runs as the primary", n, errorLine(rerr.out), primary))
}

// rewindKeepingWAL runs pg_rewind for a divergence at lsn on timeline tli,
// links back the segments of the shared history it removed (see keepWAL),
// and names a segment recovery still lacks (see missingRecoveryWAL), ""
// when none.
func (a *Agent) rewindKeepingWAL(ctx context.Context, lsn string, tli uint32) (string, error) {
	diverged, err := agentapi.ParseLSN(lsn)
	if err != nil {
		return "", err
	}
	cd, err := a.controlData(ctx)
	if err != nil {
		return "", err
	}
	segSize, err := strconv.ParseUint(cd["Bytes per WAL segment"], 10, 64)
	if err != nil || segSize == 0 {
		return "", fmt.Errorf("pg_controldata: no WAL segment size (%q)", cd["Bytes per WAL segment"])
	}
	keep := a.walKeepDir()
	if err := keepWAL(a.cfg.PGData, keep); err != nil {
		return "", err
	}
	if _, err := a.pgRewind(ctx, false); err != nil {
		return "", err
	}
	restored, err := restoreWAL(a.cfg.PGData, keep, diverged, tli, segSize)
	if len(restored) > 0 {
		a.log.Info("Linked back the WAL segments of the shared history that pg_rewind removed", "segments", restored)
	}
	if err != nil {
		return "", err
	}
	// pg_rewind wrote the minimum recovery point: the source's position
	if cd, err = a.controlData(ctx); err != nil {
		return "", err
	}
	until, err := agentapi.ParseLSN(cd["Minimum recovery ending location"])
	if err != nil {
		return "", fmt.Errorf("pg_controldata: minimum recovery ending location: %w", err)
	}
	untilTLI, err := strconv.ParseUint(cd["Min recovery ending loc's timeline"], 10, 32)
	if err != nil {
		return "", fmt.Errorf("pg_controldata: minimum recovery ending location's timeline: %w", err)
	}
	return missingRecoveryWAL(a.cfg.PGData, until, uint32(untilTLI), segSize)
}

// reclone empties the data directory of a stopped instance that cannot
// rejoin by itself (why) and leaves it Waiting, empty, for the operator to
// clone the primary into, as it does for a new instance. It runs only
// after a rewind (whose report, beside the data directory, keeps what it
// discarded): the directory then holds no history the primary lacks; or
// once otherPrimary named the instance that has all of it (a pg_rewind
// that keeps failing, a standby whose WAL is gone from the primary). A
// crash between the two steps leaves the fence marker on an empty
// directory, which rewindAndStart finishes.
func (a *Agent) reclone(why string) error {
	a.log.Info("Emptying the data directory to be cloned again", "why", why)
	if err := emptyDir(a.cfg.PGData); err != nil {
		return err
	}
	if err := a.clearFenced(); err != nil {
		return err
	}
	a.setState(agentapi.StateWaiting, why+": the data directory was emptied, to be cloned from the primary again")
	return nil
}

// ensureCleanShutdown runs crash recovery of a data directory that was not
// shut down cleanly (a fenced or crashed primary) in single-user mode, as
// pg_rewind would, but with the server's settings.
func (a *Agent) ensureCleanShutdown(ctx context.Context) error {
	cd, err := a.controlData(ctx)
	if err != nil {
		return err
	}
	if st := cd["Database cluster state"]; st == "shut down" || st == "shut down in recovery" {
		return nil
	}
	if err := a.clearStalePidFile(); err != nil {
		return err
	}
	args := append([]string{"--single", "-F", "-D", a.cfg.PGData}, a.serverSettings()...)
	// its shutdown checkpoint must not remove the WAL pg_rewind reads
	// back to the last common checkpoint.
	args = append(args, "-c", "port="+strconv.Itoa(a.cfg.Port), "-c", "wal_keep_size="+strconv.Itoa(1<<30), "template1")
	_, err = a.run(ctx, "postgres", args, nil)
	if err != nil {
		return fmt.Errorf("completing crash recovery before pg_rewind: %w", err)
	}
	return nil
}

// sourceServer is pg_rewind's connection to the primary.
func (a *Agent) sourceServer() string {
	return a.replicationConninfo(a.cfg.Pod+"-rewind", "postgres")
}

// pgRewind runs pg_rewind (a dry run when dry) and returns its output; a
// failure is a pgRewindError.
func (a *Agent) pgRewind(ctx context.Context, dry bool) (string, error) {
	args := []string{"--target-pgdata=" + a.cfg.PGData, "--source-server=" + a.sourceServer(), "--no-ensure-shutdown"}
	if dry {
		args = append(args, "--dry-run")
	}
	out, err := a.run(ctx, "pg_rewind", args, nil)
	if err != nil {
		return out, &pgRewindError{out: out, err: err}
	}
	return out, nil
}
