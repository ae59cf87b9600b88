package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// backupTimeout bounds one base backup.
const backupTimeout = 6 * time.Hour

// backupRunPath keeps the last BackupRun beside the data directory, so
// that a run the agent's restart cut short is reported as such.
func (a *Agent) backupRunPath() string {
	return filepath.Join(filepath.Dir(a.cfg.PGData), "dbkeeper-backup.json")
}

// loadBackupRun reads the persisted run; one that never finished was cut
// short by a restart.
func (a *Agent) loadBackupRun() {
	b, err := os.ReadFile(a.backupRunPath())
	if err != nil {
		return
	}
	var run agentapi.BackupRun
	if json.Unmarshal(b, &run) != nil {
		return
	}
	if run.Finished == nil {
		now := metav1.Now()
		run.Finished = &now
		run.Error = "interrupted: the agent restarted during the backup; pgBackRest does not count the partial backup, and the next one resumes or removes it"
		a.saveBackupRun(&run)
	}
	a.archive.mu.Lock()
	a.archive.run = &run
	a.archive.mu.Unlock()
}

func (a *Agent) saveBackupRun(run *agentapi.BackupRun) {
	b, _ := json.Marshal(run)
	if _, err := writeFileAtomic(a.backupRunPath(), b); err != nil {
		a.log.Error(err, "Cannot keep the base backup's record")
	}
}

// startBackup starts the base backup of req on this running primary, or
// returns the run of req's ID; a run of another ID still running is a
// conflict.
func (a *Agent) startBackup(req agentapi.BackupRequest) (agentapi.BackupRun, error) {
	r := a.archive
	if r == nil {
		return agentapi.BackupRun{}, &opError{code: http.StatusBadRequest, msg: "this instance has no repository (spec.backup.objectStore)"}
	}
	typ := req.Type
	if typ == "" {
		typ = "incr"
	}
	if typ != "full" && typ != "diff" && typ != "incr" {
		return agentapi.BackupRun{}, &opError{code: http.StatusBadRequest, msg: "backup type must be full, diff or incr"}
	}
	if req.ID == "" {
		return agentapi.BackupRun{}, &opError{code: http.StatusBadRequest, msg: "a backup request needs an id"}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.run != nil && r.run.ID == req.ID {
		return *r.run, nil
	}
	if r.run != nil && r.run.Finished == nil {
		return *r.run, conflict("base backup %q is running since %s", r.run.ID, r.run.Started.UTC().Format(time.RFC3339))
	}
	if !r.stanzaOK {
		return agentapi.BackupRun{}, conflict("the repository is not ready: %s", orNone(r.stanzaErr))
	}
	if !a.runningPrimary() {
		return agentapi.BackupRun{}, conflict("%s", errNotPrimary)
	}
	run := &agentapi.BackupRun{ID: req.ID, Type: typ, Instance: a.cfg.Pod, Started: metav1.Now()}
	r.run = run
	a.saveBackupRun(run)
	a.log.Info("Starting a base backup", "id", req.ID, "type", typ)
	go a.runBackup(*run)
	return *run, nil
}

// runBackup runs pgbackrest backup for run and records how it ended:
// from a streaming standby when there is one (backupstandby.go), else, or
// when that fails, from the primary.
func (a *Agent) runBackup(run agentapi.BackupRun) {
	start := time.Now()
	standby, p, why := a.backupSource(a.ctx)
	var err error
	if standby != "" {
		run.Instance, run.Note = standby, "taken from standby "+standby
		a.setRun(&run)
		a.log.Info("Taking the base backup from a standby", "id", run.ID, "standby", standby, "host", p.Host, "port", p.Port)
		if err = a.backupFromStandby(run, p); err != nil && a.ctx.Err() == nil {
			why = fmt.Sprintf("taken from the primary: the backup from standby %s failed: %s", standby, err)
			a.log.Error(err, "The base backup from the standby failed: taking it from the primary", "id", run.ID, "standby", standby)
			standby = ""
		}
	}
	if standby == "" {
		run.Instance, run.Note = a.cfg.Pod, why
		a.setRun(&run)
		if why != "" {
			a.log.Info("Taking the base backup from the primary", "id", run.ID, "why", why)
		}
		_, err = a.pgbackrest(a.ctx, a.archive.configPath(), backupTimeout, "backup", "--type="+run.Type, longIOTimeout)
	}
	now := metav1.Now()
	run.Finished = &now
	if err != nil {
		run.Error = err.Error()
		a.log.Error(err, "The base backup failed", "id", run.ID)
	} else {
		a.log.Info("The base backup finished", "id", run.ID, "instance", run.Instance, "duration", time.Since(start).Round(time.Millisecond))
	}
	a.setRun(&run)
	a.refreshInfo(context.WithoutCancel(a.ctx), true)
}

// setRun records run, on disk and for the status.
func (a *Agent) setRun(run *agentapi.BackupRun) {
	a.saveBackupRun(run)
	r := *run
	a.archive.mu.Lock()
	a.archive.run = &r
	a.archive.mu.Unlock()
}

func (a *Agent) handleBackup(w http.ResponseWriter, r *http.Request) {
	var req agentapi.BackupRequest
	if !readJSON(w, r, &req) {
		return
	}
	run, err := a.startBackup(req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, run)
}
