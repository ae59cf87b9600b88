package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// archiver keeps an instance's pgBackRest configuration in line with its
// Repository (the credentials are re-read, so a rotated key is used from
// the next segment on), creates the stanza once the instance is a running
// primary, and caches what `pgbackrest info` says of the repository.
// PostgreSQL itself ships the WAL: archive_command runs pgbackrest
// archive-push for each completed segment, on the primary and on every
// standby (archiveSettings).
type archiver struct {
	repo agentapi.Repository
	// dir holds the configuration, pgBackRest's logs, locks and spool.
	dir string

	mu        sync.Mutex
	stanzaOK  bool
	stanzaErr string
	info      *repositoryInfo
	infoErr   string
	infoAt    time.Time
	run       *agentapi.BackupRun
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
// locks and spool: cfg.RuntimeDir, or a temporary one. The temporary ones
// of earlier runs of the agent in the same pod (a container restart keeps
// /tmp) go first: their configuration holds the store's key. keep, when
// not empty, is the directory of the agent this one took over from in
// place, which the running server's archive_command and hba_file name: it
// stays and is this agent's.
func makeRuntimeDir(cfg Config, keep string) (string, error) {
	dir := cfg.RuntimeDir
	if dir == "" {
		old, _ := filepath.Glob(filepath.Join(os.TempDir(), runtimeDirPrefix+"*"))
		for _, o := range old {
			if o != keep {
				_ = os.RemoveAll(o)
			}
		}
		if fi, err := os.Stat(keep); keep != "" && err == nil && fi.IsDir() {
			dir = keep
		} else if dir, err = os.MkdirTemp("", runtimeDirPrefix); err != nil {
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

// setUpArchive makes the runtime directory (keeping keep, the one of the
// agent this one took over from: makeRuntimeDir), clears a restore that
// was cut short and, with a Repository, makes the archiver: its
// configuration is written before the server can start (archive_command
// reads it), and its loop runs until ctx ends.
func (a *Agent) setUpArchive(ctx context.Context, keep string) error {
	dir, err := makeRuntimeDir(a.cfg, keep)
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
func (a *Agent) writeConfig(repo agentapi.Repository, path string) error {
	o, err := pgbackrestOptions(repo, filepath.Dir(path))
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
	running := a.srv != nil && a.state == agentapi.StateRunning
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
