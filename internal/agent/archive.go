package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// archiver keeps an instance's pgBackRest configuration in line with its
// Repository (the credentials are re-read, so a rotated key is used from
// the next segment on), creates the stanza once the instance is a running
// primary, and caches what `pgbackrest info` says of the repository.
// PostgreSQL itself ships the WAL: archive_command runs pgbackrest
// archive-push for each completed segment, on the primary and on every
// standby (archiveSettings).
type archiver struct {
	repo Repository
	// dir holds the configuration, pgBackRest's logs, locks and spool.
	dir string

	mu        sync.Mutex
	stanzaOK  bool
	stanzaErr string
	info      *repositoryInfo
	infoErr   string
	infoAt    time.Time
	run       *BackupRun
	// infoDirty asks for `pgbackrest info` at the next tick (a backup
	// finished).
	infoDirty bool
	// poke wakes the loop before its tick: the server has just started
	// accepting connections, so a new primary creates the stanza at once.
	poke chan struct{}
	// expiring is held while an expiry runs, or a base backup is being
	// started (expire.go): never both at once.
	expiring chan struct{}
	// expireTriedAt is when the last expiry ran (a lock refusal does not
	// count), expireErr how it failed; expiredAt is when the last one
	// succeeded: the recovery window it kept ended there.
	expireTriedAt time.Time
	expireErr     string
	expiredAt     *metav1.Time
}

// pokeArchive wakes the archiver's loop, if there is one.
func (a *Agent) pokeArchive() {
	if a.archive == nil {
		return
	}
	select {
	case a.archive.poke <- struct{}{}:
	default:
	}
}

// archivePushTimeout bounds one archive-push (a 16 MiB segment).
const archivePushTimeout = 2 * time.Minute

// archiveTick is how often the archiver refreshes the configuration and,
// on the primary, tries the stanza; infoEvery how often it reads the
// repository.
const (
	archiveTick = 10 * time.Second
	infoEvery   = time.Minute
	// pgbackrestTimeout bounds a stanza-create, check or info.
	pgbackrestTimeout = 2 * time.Minute
)

// configPath is the pgBackRest configuration of the instance's own
// repository.
func (r *archiver) configPath() string { return filepath.Join(r.dir, "pgbackrest.conf") }

// archiveErrorPath holds what the last archive-push wrote to stderr: its
// ERROR says why archiving fails. (pgBackRest's archive-push writes no
// file log of its own.)
func (r *archiver) archiveErrorPath() string {
	return filepath.Join(r.dir, "archive-push.stderr")
}

// makeRuntimeDir makes the directory of pgBackRest's configuration, logs,
// locks and spool: cfg.RuntimeDir, or a new temporary one. The temporary
// ones of earlier runs of the agent in the same pod (a container restart
// keeps /tmp) go first: their configuration holds the store's key.
func makeRuntimeDir(cfg Config) (string, error) {
	dir := cfg.RuntimeDir
	if dir == "" {
		old, _ := filepath.Glob(filepath.Join(os.TempDir(), runtimeDirPrefix+"*"))
		for _, o := range old {
			_ = os.RemoveAll(o)
		}
		var err error
		if dir, err = os.MkdirTemp("", runtimeDirPrefix); err != nil {
			return "", fmt.Errorf("making pgBackRest's directory: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "lock"), 0o700); err != nil {
		return "", fmt.Errorf("making pgBackRest's directory: %w", err)
	}
	return dir, nil
}

// runtimeDirPrefix begins the name of a temporary runtime directory.
const runtimeDirPrefix = "dbkeeper-pgbackrest-"

// setUpArchive makes the runtime directory, clears a restore that was cut
// short and, with a Repository, makes the archiver: its configuration is written before the server can start
// (archive_command reads it), and its loop runs until ctx ends.
func (a *Agent) setUpArchive(ctx context.Context) error {
	dir, err := makeRuntimeDir(a.cfg)
	if err != nil {
		return err
	}
	a.runtimeDir = dir
	if err := a.clearHalfRestore(); err != nil {
		return err
	}
	if a.cfg.Repository == nil {
		return nil
	}
	a.archive = &archiver{repo: *a.cfg.Repository, dir: dir, poke: make(chan struct{}, 1), expiring: make(chan struct{}, 1)}
	if err := a.writeConfig(a.archive.repo, a.archive.configPath()); err != nil {
		// the loop retries: a Secret's key may appear later.
		a.log.Error(err, "Cannot write the pgBackRest configuration yet")
	}
	a.loadBackupRun()
	go a.archiveLoop(ctx)
	return nil
}

// writeConfig writes the configuration of repo (for the local server) to
// path unless it holds it already.
func (a *Agent) writeConfig(repo Repository, path string) error {
	o, err := repo.pgbackrestOptions(filepath.Dir(path))
	if err != nil {
		return err
	}
	conf := pgbackrestConfig(o, a.cfg.PGData, a.cfg.SocketDir, a.cfg.Port, a.cfg.User)
	changed, err := writeFileAtomic(path, []byte(conf))
	if changed && err == nil {
		a.log.V(1).Info("Wrote the pgBackRest configuration", "path", path)
	}
	return err
}

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
		secs, a.archive.configPath(), Stanza, run, secs, run, run, errFile, errFile)
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

// pgbackrest runs pgbackrest with the configuration conf and args, within
// timeout, and returns its output; an error carries pgBackRest's own
// message.
func (a *Agent) pgbackrest(ctx context.Context, conf string, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := a.run(ctx, "pgbackrest", append([]string{"--config=" + conf, "--stanza=" + Stanza}, args...), nil)
	if err != nil {
		return out, fmt.Errorf("pgbackrest %s: %s", args[0], pgbackrestError(out, err))
	}
	return out, nil
}

// pgbackrestError is what pgBackRest's output says failed: its ERROR line
// with the causes on the indented lines after it ("ERROR: [103]: unable
// to find a valid repository: repo1: [FileReadError] ... timeout after
// 10000ms waiting for read from ..."), and the store's own error code
// from a response body ("<Code>NoSuchBucket</Code>"); else err.
func pgbackrestError(out string, err error) string {
	if msg := lastErrorIn(out); msg != "" {
		if _, rest, ok := strings.Cut(out, "<Code>"); ok {
			if code, _, ok := strings.Cut(rest, "</Code>"); ok && !strings.Contains(msg, code) {
				msg += " " + code
			}
		}
		return msg
	}
	if s := strings.TrimSpace(out); s != "" {
		return errorLine(s)
	}
	return err.Error()
}

// lastErrorIn is the last ERROR of pgBackRest's output or log, without
// its timestamp and process prefix, joined with the causes on the
// indented lines that follow it (not its HINTs); empty without one.
func lastErrorIn(out string) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		j := strings.Index(lines[i], "ERROR:")
		if j < 0 {
			continue
		}
		parts := []string{strings.TrimSpace(lines[i][j:])}
		for _, l := range lines[i+1:] {
			t := strings.TrimSpace(l)
			if t == "" || t == l || strings.HasPrefix(t, "HINT:") || len(parts) == 4 {
				break
			}
			parts = append(parts, t)
		}
		return strings.Join(parts, " ")
	}
	return ""
}

// archiveLoop keeps the archiver's configuration, stanza and repository
// information until ctx ends.
func (a *Agent) archiveLoop(ctx context.Context) {
	r := a.archive
	for {
		if err := a.writeConfig(r.repo, r.configPath()); err != nil {
			a.log.Error(err, "Cannot write the pgBackRest configuration: archiving fails until it can")
			r.mu.Lock()
			r.stanzaErr = err.Error()
			r.mu.Unlock()
		} else if a.runningPrimary() {
			a.ensureStanza(ctx)
			a.refreshInfo(ctx, false)
		}
		select {
		case <-ctx.Done():
			return
		case <-r.poke:
		case <-time.After(archiveTick):
		}
	}
}

// runningPrimary says whether the server runs and accepts writes.
func (a *Agent) runningPrimary() bool {
	a.mu.Lock()
	running := a.srv != nil && a.state == StateRunning
	a.mu.Unlock()
	return running && !isStandby(a.cfg.PGData) && !hasRecoverySignal(a.cfg.PGData)
}

// ensureStanza creates the stanza in the repository once (stanza-create
// is idempotent for the same server, and refuses a repository that holds
// another server's archive).
func (a *Agent) ensureStanza(ctx context.Context) {
	r := a.archive
	r.mu.Lock()
	ok := r.stanzaOK
	r.mu.Unlock()
	if ok {
		return
	}
	_, err := a.pgbackrest(ctx, r.configPath(), pgbackrestTimeout, "stanza-create")
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		msg := err.Error()
		if r.stanzaErr != msg {
			a.log.Error(err, "Cannot create the pgBackRest stanza", "bucket", r.repo.Bucket, "path", r.repo.Path)
		}
		r.stanzaErr = msg
		return
	}
	a.log.Info("The repository is ready", "bucket", r.repo.Bucket, "path", r.repo.Path)
	r.stanzaOK, r.stanzaErr, r.infoDirty = true, "", true
}

// refreshInfo reads `pgbackrest info` when it is due (or force) and, on
// the primary, expires what the recovery window no longer needs when
// that is due (maybeExpire) before it reports what it read: a backup
// shows in the status once the expiry after it is done.
func (a *Agent) refreshInfo(ctx context.Context, force bool) {
	r := a.archive
	r.mu.Lock()
	due := force || r.infoDirty || time.Since(r.infoAt) >= infoEvery
	ok := r.stanzaOK
	r.mu.Unlock()
	if !due || !ok {
		return
	}
	info, err := a.readInfo(ctx)
	if err == nil && a.runningPrimary() && a.maybeExpire(ctx, info) {
		return // it reported the repository after the expiry
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.infoAt, r.infoDirty = time.Now(), false
	if err != nil {
		r.infoErr = err.Error()
		return
	}
	r.info, r.infoErr = info, ""
}

// readInfo runs `pgbackrest info` of the archiver's repository.
func (a *Agent) readInfo(ctx context.Context) (*repositoryInfo, error) {
	out, err := a.pgbackrest(ctx, a.archive.configPath(), pgbackrestTimeout, "info", "--output=json")
	if err != nil {
		return nil, err
	}
	return parseInfo(out)
}

// ArchiveReport is what an instance with a Repository says of it, in its
// Status; the primary's is the Database's.
type ArchiveReport struct {
	// Repository is bucket/path.
	Repository string `json:"repository"`
	// StanzaReady says the repository was created (or found) for this
	// server; StanzaError says why not (another server's archive there,
	// the store's error).
	StanzaReady bool   `json:"stanzaReady,omitempty"`
	StanzaError string `json:"stanzaError,omitempty"`
	// The primary's pg_stat_archiver.
	ArchivedCount    int64        `json:"archivedCount,omitempty"`
	LastArchivedWAL  string       `json:"lastArchivedWAL,omitempty"`
	LastArchivedTime *metav1.Time `json:"lastArchivedTime,omitempty"`
	FailedCount      int64        `json:"failedCount,omitempty"`
	LastFailedWAL    string       `json:"lastFailedWAL,omitempty"`
	LastFailedTime   *metav1.Time `json:"lastFailedTime,omitempty"`
	// LastFailure is pgBackRest's last archive-push error.
	LastFailure string `json:"lastFailure,omitempty"`
	// WALBytes is the size of pg_wal.
	WALBytes int64 `json:"walBytes,omitempty"`
	// WaitingSegments counts the completed segments waiting to be
	// archived (pg_wal/archive_status/*.ready), OldestWaiting is when the
	// oldest of them was completed: an archive_command that hangs (a store
	// that does not answer) shows here before pgBackRest gives up.
	WaitingSegments int          `json:"waitingSegments,omitempty"`
	OldestWaiting   *metav1.Time `json:"oldestWaiting,omitempty"`
	// StatsAt is when the primary's statistics were read.
	StatsAt *metav1.Time `json:"statsAt,omitempty"`
	// Backups are the repository's base backups, oldest first, as
	// `pgbackrest info` last said; InfoError why it could not.
	Backups   []BaseBackup `json:"backups,omitempty"`
	InfoError string       `json:"infoError,omitempty"`
	// ArchiveMin and ArchiveMax are the oldest and newest WAL segments in
	// the archive.
	ArchiveMin string `json:"archiveMin,omitempty"`
	ArchiveMax string `json:"archiveMax,omitempty"`
	// Run is the last base backup this agent ran (or runs).
	Run *BackupRun `json:"run,omitempty"`
	// ExpiredAt is when this agent last expired the repository: it kept
	// every backup and WAL segment a point of the recovery window ending
	// then needs. ExpireError is pgBackRest's message when the last
	// expiry failed.
	ExpiredAt   *metav1.Time `json:"expiredAt,omitempty"`
	ExpireError string       `json:"expireError,omitempty"`
}

// BaseBackup is one base backup in the repository.
type BaseBackup struct {
	Label          string      `json:"label"`
	Type           string      `json:"type"`
	Started        metav1.Time `json:"started"`
	Finished       metav1.Time `json:"finished"`
	Size           int64       `json:"size,omitempty"`
	RepositorySize int64       `json:"repositorySize,omitempty"`
	StartLSN       string      `json:"startLSN,omitempty"`
	StopLSN        string      `json:"stopLSN,omitempty"`
	StartWAL       string      `json:"startWAL,omitempty"`
	StopWAL        string      `json:"stopWAL,omitempty"`
}

// repositoryInfo is what the archiver keeps of `pgbackrest info`.
type repositoryInfo struct {
	backups    []BaseBackup
	archiveMin string
	archiveMax string
}

// parseInfo reads `pgbackrest info --output=json` of one stanza.
func parseInfo(out string) (*repositoryInfo, error) {
	var stanzas []struct {
		Archive []struct {
			Min string `json:"min"`
			Max string `json:"max"`
		} `json:"archive"`
		Backup []struct {
			Label   string `json:"label"`
			Type    string `json:"type"`
			Error   bool   `json:"error"`
			Archive struct {
				Start string `json:"start"`
				Stop  string `json:"stop"`
			} `json:"archive"`
			Info struct {
				Size       int64 `json:"size"`
				Repository struct {
					Delta int64 `json:"delta"`
				} `json:"repository"`
			} `json:"info"`
			LSN struct {
				Start string `json:"start"`
				Stop  string `json:"stop"`
			} `json:"lsn"`
			Timestamp struct {
				Start int64 `json:"start"`
				Stop  int64 `json:"stop"`
			} `json:"timestamp"`
		} `json:"backup"`
		Status struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"status"`
		Repo []struct {
			Status struct {
				Message string `json:"message"`
			} `json:"status"`
		} `json:"repo"`
	}
	if err := json.Unmarshal([]byte(out), &stanzas); err != nil {
		return nil, fmt.Errorf("reading pgbackrest info: %w", err)
	}
	if len(stanzas) != 1 {
		return nil, fmt.Errorf("pgbackrest info: %d stanzas, want 1", len(stanzas))
	}
	st := stanzas[0]
	// info exits 0 whatever happened: its status says (2: no backup yet).
	if st.Status.Code != 0 && st.Status.Code != 2 {
		msg := st.Status.Message
		for _, r := range st.Repo {
			msg += ": " + r.Status.Message
		}
		return nil, fmt.Errorf("pgbackrest info: %s", msg)
	}
	info := &repositoryInfo{}
	for _, ar := range st.Archive {
		if info.archiveMin == "" || ar.Min < info.archiveMin {
			info.archiveMin = ar.Min
		}
		if ar.Max > info.archiveMax {
			info.archiveMax = ar.Max
		}
	}
	for _, b := range st.Backup {
		if b.Error {
			continue
		}
		info.backups = append(info.backups, BaseBackup{
			Label: b.Label, Type: b.Type,
			Started:  metav1.Unix(b.Timestamp.Start, 0),
			Finished: metav1.Unix(b.Timestamp.Stop, 0),
			Size:     b.Info.Size, RepositorySize: b.Info.Repository.Delta,
			StartLSN: b.LSN.Start, StopLSN: b.LSN.Stop,
			StartWAL: b.Archive.Start, StopWAL: b.Archive.Stop,
		})
	}
	return info, nil
}

// archiveReport is the archiver's report; with stats, the running
// primary's pg_stat_archiver and pg_wal size too.
func (a *Agent) archiveReport(ctx context.Context, primary bool) *ArchiveReport {
	r := a.archive
	if r == nil {
		return nil
	}
	r.mu.Lock()
	rep := &ArchiveReport{
		Repository:  r.repo.Bucket + r.repo.Path,
		StanzaReady: r.stanzaOK, StanzaError: r.stanzaErr, InfoError: r.infoErr,
	}
	if r.info != nil {
		rep.Backups = append([]BaseBackup(nil), r.info.backups...)
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

func (a *Agent) archiverStats(ctx context.Context, rep *ArchiveReport) error {
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

// lastError is the last ERROR of a file of pgBackRest's output, with its
// causes (lastErrorIn); empty when there is none.
func lastError(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return lastErrorIn(string(b))
}

// hasRecoverySignal says whether the data directory is in targeted
// recovery (recovery.signal: a restore that has not been promoted yet).
func hasRecoverySignal(pgdata string) bool {
	_, err := os.Stat(filepath.Join(pgdata, "recovery.signal"))
	return err == nil
}

// errNotPrimary refuses what only a running primary does.
var errNotPrimary = errors.New("this instance is not a running primary")
