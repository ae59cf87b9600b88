package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// The files of a takeover, beside the agent's binary.
const (
	// handoverFile is what an agent that replaces itself hands the new
	// one (handover); the new agent removes it once it adopted the server.
	handoverFile = "handover.json"
	// handoverFailedFile is written by the new agent before it adopts and
	// removed once it did: a start that finds it (the agent restarted
	// while adopting) ignores the handover.
	handoverFailedFile = "handover.failed"
)

// handover is what an agent that replaces itself in place (execve) tells
// the new one of the server it runs, which the new one adopts instead of
// starting one (docs/design/upgrades.md).
type handover struct {
	// PID is the postmaster's pid, a child of the agent.
	PID int `json:"pid"`
	// Output are the fd numbers of the read ends of the server's stdout
	// and stderr pipes, left open across the exec.
	Output []int `json:"output"`
	// CollectorDir is the directory of the logging collector's pipes
	// (PostgreSQL 15 and later), empty when the server logs to stderr.
	CollectorDir string `json:"collectorDir,omitempty"`
	// CollectorFDs hold the collector's pipes open across the exec
	// (holdFIFOs); the new agent closes them once its readers read.
	CollectorFDs []int `json:"collectorFDs,omitempty"`
	// RuntimeDir is pgBackRest's runtime directory (Agent.runtimeDir),
	// which the running server's archive_command and hba_file name: the
	// new agent keeps it rather than making its own.
	RuntimeDir string `json:"runtimeDir,omitempty"`
	// State is the agent's state; Standby says the server is a standby.
	State   agentapi.State `json:"state"`
	Standby bool           `json:"standby"`
	// Accepted says the server accepted connections (it started with the
	// last-start record's postgresql.auto.conf, saveLastStarted).
	Accepted bool `json:"accepted"`
	// Lease is the primary lease the agent holds; nil when it holds none.
	Lease *handoverLease `json:"lease,omitempty"`
	// From is the replaced agent's version; At when it handed over.
	From string    `json:"from"`
	At   time.Time `json:"at"`
}

// handoverLease is the primary lease an agent holds as it hands over: the
// new agent renews it as the same holder.
type handoverLease struct {
	// ResourceVersion is the lease's last version read.
	ResourceVersion string `json:"resourceVersion"`
	// LastRenew is when the last successful renew began (wall clock).
	LastRenew time.Time `json:"lastRenew"`
}

// handoverPaths are the handover file and its failed marker beside
// binary.
func handoverPaths(binary string) (file, failed string) {
	dir := filepath.Dir(binary)
	return filepath.Join(dir, handoverFile), filepath.Join(dir, handoverFailedFile)
}

// failedMarker is the failed marker of the handover file path.
func failedMarker(path string) string {
	return filepath.Join(filepath.Dir(path), handoverFailedFile)
}

// writeHandover writes h to path, synced.
func writeHandover(path string, h handover) error {
	b, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("writing the handover: %w", err)
	}
	if err := writeSynced(path, b); err != nil {
		return fmt.Errorf("writing the handover: %w", err)
	}
	return nil
}

// readHandover reads the handover file path.
func readHandover(path string) (handover, error) {
	var h handover
	b, err := os.ReadFile(path)
	if err != nil {
		return h, fmt.Errorf("reading the handover: %w", err)
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return h, fmt.Errorf("reading the handover %s: %w", path, err)
	}
	if h.PID <= 1 || len(h.Output) != 2 {
		return h, fmt.Errorf("reading the handover %s: no server's pid and output", path)
	}
	return h, nil
}

// writeSynced writes b to path (mode 0600) and syncs it and its
// directory.
func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// setCloseOnExec sets (on) or clears FD_CLOEXEC on each of files' fds,
// without changing their blocking mode (os.File.Fd would).
func setCloseOnExec(files []*os.File, on bool) error {
	flag := 0
	if on {
		flag = syscall.FD_CLOEXEC
	}
	for _, f := range files {
		rc, err := f.SyscallConn()
		if err != nil {
			return fmt.Errorf("passing the server's output: %w", err)
		}
		var errno syscall.Errno
		if err := rc.Control(func(fd uintptr) {
			_, _, errno = syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_SETFD, uintptr(flag))
		}); err != nil {
			return fmt.Errorf("passing the server's output: %w", err)
		}
		if errno != 0 {
			return fmt.Errorf("passing the server's output: fcntl: %w", errno)
		}
	}
	return nil
}

// fdsOf are the fd numbers of files, which must be open.
func fdsOf(files []*os.File) ([]int, error) {
	var fds []int
	for _, f := range files {
		rc, err := f.SyscallConn()
		if err != nil {
			return nil, fmt.Errorf("passing the server's output: %w", err)
		}
		if err := rc.Control(func(fd uintptr) { fds = append(fds, int(fd)) }); err != nil {
			return nil, fmt.Errorf("passing the server's output: %w", err)
		}
	}
	return fds, nil
}

// withEnv is env with name set to value (once).
func withEnv(env []string, name, value string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return append(out, name+"="+value)
}
