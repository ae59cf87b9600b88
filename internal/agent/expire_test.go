package agent

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// TestFullsToKeep: expiry keeps every full backup that stopped after the
// window's start W and the newest one that stopped at or before it (in
// whole seconds: the second it stopped in ended by W), all of them when
// none did; differential and incremental backups are not counted.
func TestFullsToKeep(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	const window = time.Hour
	w := now.Add(-window) // the window's start
	backup := func(typ string, stop time.Time) agentapi.BaseBackup {
		return agentapi.BaseBackup{Type: typ, Finished: metav1.NewTime(stop)}
	}
	full := func(stop time.Time) agentapi.BaseBackup { return backup("full", stop) }
	for _, tc := range []struct {
		name        string
		backups     []agentapi.BaseBackup
		keep, fulls int
	}{
		{name: "no backups", keep: 0, fulls: 0},
		{name: "only incremental ones (no full left)", backups: []agentapi.BaseBackup{backup("incr", w.Add(-time.Hour))}, keep: 0, fulls: 0},
		{name: "all inside the window", backups: []agentapi.BaseBackup{full(w.Add(time.Minute)), full(w.Add(30 * time.Minute)), full(now)}, keep: 3, fulls: 3},
		{name: "the only full outside the window", backups: []agentapi.BaseBackup{full(w.Add(-24 * time.Hour))}, keep: 1, fulls: 1},
		{name: "all outside: the newest stays", backups: []agentapi.BaseBackup{full(w.Add(-3 * time.Hour)), full(w.Add(-2 * time.Hour)), full(w.Add(-time.Hour))}, keep: 1, fulls: 3},
		{name: "two before, two inside", backups: []agentapi.BaseBackup{full(w.Add(-2 * time.Hour)), full(w.Add(-time.Hour)), full(w.Add(time.Minute)), full(now)}, keep: 3, fulls: 4},
		{name: "diff and incr backups are not counted", backups: []agentapi.BaseBackup{
			full(w.Add(-3 * time.Hour)), backup("diff", w.Add(-150*time.Minute)), backup("incr", w.Add(-140*time.Minute)),
			full(w.Add(-2 * time.Hour)), backup("incr", w.Add(-time.Hour)), backup("incr", w.Add(time.Minute)),
			full(w.Add(10 * time.Minute)), backup("diff", now),
		}, keep: 2, fulls: 3},
		{name: "incremental backups inside the window keep no older full", backups: []agentapi.BaseBackup{
			full(w.Add(-3 * time.Hour)), full(w.Add(-2 * time.Hour)), backup("incr", w.Add(time.Minute)), backup("incr", now),
		}, keep: 1, fulls: 2},
		// whole seconds: a backup recorded as stopped in second s may have
		// stopped at s+0.999, and a restore to a target in that second
		// does not take it.
		{name: "stopped in the second before W", backups: []agentapi.BaseBackup{full(w.Add(-2 * time.Hour)), full(w.Add(-time.Second))}, keep: 1, fulls: 2},
		{name: "stopped in the second of W", backups: []agentapi.BaseBackup{full(w.Add(-2 * time.Hour)), full(w)}, keep: 2, fulls: 2},
		{name: "stopped half a second before W", backups: []agentapi.BaseBackup{full(w.Add(-2 * time.Hour)), full(w.Add(-500 * time.Millisecond))}, keep: 2, fulls: 2},
		{name: "equal stop times before W", backups: []agentapi.BaseBackup{full(w.Add(-time.Hour)), full(w.Add(-time.Hour)), full(w.Add(time.Minute))}, keep: 2, fulls: 3},
		{name: "equal stop times inside", backups: []agentapi.BaseBackup{full(w.Add(-time.Hour)), full(w.Add(time.Minute)), full(w.Add(time.Minute))}, keep: 3, fulls: 3},
		{name: "a stop time ahead of the clock", backups: []agentapi.BaseBackup{full(w.Add(-time.Hour)), full(now.Add(time.Minute))}, keep: 2, fulls: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keep, fulls := fullsToKeep(tc.backups, window, now)
			assert.Equal(t, tc.keep, keep, "kept")
			assert.Equal(t, tc.fulls, fulls, "full backups")
			if fulls > 0 {
				assert.GreaterOrEqual(t, keep, 1, "an expiry never removes every full backup")
			}
		})
	}
}

// TestExpireDue: an expiry runs at the agent's start, after a base
// backup finished, at once when a full backup left the window (unless
// the last expiry failed), and otherwise every expireEvery.
func TestExpireDue(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	last := now.Add(-time.Minute)
	before, after := metav1.NewTime(last.Add(-time.Second)), metav1.NewTime(last.Add(time.Second))
	for _, tc := range []struct {
		name        string
		last        time.Time
		lastErr     string
		finished    *metav1.Time
		keep, fulls int
		due         bool
	}{
		{name: "never expired", keep: 1, fulls: 1, due: true},
		{name: "expired a minute ago, nothing to remove", last: last, keep: 2, fulls: 2},
		{name: "expired a minute ago, a backup finished before it", last: last, finished: &before, keep: 2, fulls: 2},
		{name: "a backup finished since", last: last, finished: &after, keep: 2, fulls: 2, due: true},
		{name: "a full backup left the window", last: last, keep: 1, fulls: 2, due: true},
		{name: "a full backup left the window, the last expiry failed", last: last, lastErr: "pgbackrest expire: ERROR", keep: 1, fulls: 2},
		{name: "the last expiry failed, a backup finished since", last: last, lastErr: "pgbackrest expire: ERROR", finished: &after, keep: 1, fulls: 2, due: true},
		{name: "ten minutes since", last: now.Add(-expireEvery), keep: 2, fulls: 2, due: true},
		{name: "ten minutes since the failure", last: now.Add(-expireEvery), lastErr: "pgbackrest expire: ERROR", keep: 1, fulls: 2, due: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.due, expireDue(now, tc.last, tc.lastErr, tc.finished, tc.keep, tc.fulls))
		})
	}
}

// TestExpireErrors: pgBackRest's refusal to run beside a command that
// holds the stanza's lock is told apart from a failure, and a failure
// says the repository's error, not expire's summary after it (outputs of
// pgBackRest 2.45).
func TestExpireErrors(t *testing.T) {
	locked := "ERROR: [050]: unable to acquire lock on file '/tmp/x/lock/db-backup.lock': Resource temporarily unavailable\n       HINT: is another pgBackRest process running?\n"
	err := expireError(locked, fmt.Errorf("pgbackrest expire: %s", pgbackrestError(locked, errors.New("exit status 50"))))
	assert.True(t, isLockRefusal(err), "%v", err)

	failed := `ERROR: [055]: repo1: unable to load info file '/r/backup/db/backup.info' or '/r/backup/db/backup.info.copy':
       FileMissingError: unable to open missing file '/r/backup/db/backup.info' for read
       HINT: backup.info cannot be opened and is required to perform a backup.
ERROR: [104]: expire command encountered 1 error(s), check the log file for details
`
	err = expireError(failed, errors.New("pgbackrest expire: ERROR: [104]: expire command encountered 1 error(s), check the log file for details"))
	assert.False(t, isLockRefusal(err))
	assert.Equal(t, "pgbackrest expire: ERROR: [055]: repo1: unable to load info file '/r/backup/db/backup.info' or '/r/backup/db/backup.info.copy': "+
		"FileMissingError: unable to open missing file '/r/backup/db/backup.info' for read", err.Error())
	assert.NoError(t, expireError("", nil))
}
