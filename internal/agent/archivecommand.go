package agent

import (
	"fmt"
	"strconv"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// archivePushTimeout bounds one archive-push (a 16 MiB segment).
const archivePushTimeout = 2 * time.Minute

// archiveSettings are the server settings of continuous archiving.
func (a *Agent) archiveSettings() []string {
	if a.archive == nil {
		return nil
	}
	// stderr goes to a file the agent reads, and to PostgreSQL's log when
	// the push failed. pgBackRest 2.55 (trixie's) went on retrying a store
	// that hangs well past its 8 io-timeouts: archivePushTimeout bounds
	// each push, so that the failure is counted and PostgreSQL retries.
	// A push writes its own file, which replaces the error file only when
	// it failed: the next push, which may hang for minutes, does not empty
	// what the last failure said.
	errFile := a.archive.archiveErrorPath()
	run := errFile + ".run"
	secs := int(archivePushTimeout / time.Second)
	cmd := fmt.Sprintf(`timeout %d pgbackrest --config=%s --stanza=%s archive-push "%%p" 2>%s || { rc=$?; `+
		`[ $rc -ne 124 ] || echo "ERROR: archive-push timed out after %ds: the store did not answer" >>%s; mv -f %s %s; cat %s >&2; exit $rc; }`,
		secs, a.archive.configPath(), agentapi.Stanza, run, secs, run, run, errFile, errFile)
	timeout := a.archive.repo.ArchiveTimeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	// A standby archives what it receives too (always): with on, its
	// received segments are marked done, and a promoted standby archives
	// only what it writes itself, so a segment its lost primary completed
	// but had not pushed yet would be a hole in the archive that no
	// recovery past it gets over. A segment pushed twice is the same
	// file, which pgBackRest accepts. A restore's recovery archives
	// nothing (on): the segments it replays are the source's.
	mode := "on"
	if isStandby(a.cfg.PGData) {
		mode = "always"
	}
	// track_commit_timestamp: a point-in-time recovery targets a commit
	// time, which pg_xact_commit_timestamp(xmin) tells of any row.
	return []string{"-c", "archive_mode=" + mode, "-c", "archive_command=" + cmd,
		"-c", "archive_timeout=" + strconv.Itoa(int(timeout/time.Second)),
		"-c", "track_commit_timestamp=on"}
}
