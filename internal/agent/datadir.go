package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// The files of a data directory the agent reads or writes.
const (
	versionFile = "PG_VERSION"
	standbyFile = "standby.signal"
	hbaFile     = "pg_hba.conf"
)

// replicationHBA lets standbys stream as ReplicationUser with its password
// (only for a Database without TLS: with TLS the hba file is the
// operator's ConfigMap, which holds its own line).
var replicationHBA = "host replication " + agentapi.ReplicationUser + " all scram-sha-256"

// rewindHBA lets a former primary's pg_rewind read the primary's files as
// ReplicationUser (through the functions the replication controller
// grants it), again only without TLS.
var rewindHBA = "host postgres " + agentapi.ReplicationUser + " all scram-sha-256"

// hasCluster says the data directory holds a cluster.
func hasCluster(pgdata string) bool {
	fi, err := os.Stat(filepath.Join(pgdata, versionFile))
	return err == nil && fi.Size() > 0
}

// isEmpty says the data directory is missing or has nothing in it.
func isEmpty(pgdata string) (bool, error) {
	entries, err := os.ReadDir(pgdata)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the data directory: %w", err)
	}
	return len(entries) == 0, nil
}

// emptyDir removes everything in dir, leaving dir itself (a volume's root
// cannot be removed).
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("emptying the data directory: %w", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("emptying the data directory: %w", err)
		}
	}
	return nil
}

// postmasterPID is the pid in the data directory's postmaster.pid, 0 when
// there is none.
func postmasterPID(pgdata string) int {
	b, err := os.ReadFile(filepath.Join(pgdata, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// isStandby says the data directory starts a standby.
func isStandby(pgdata string) bool {
	_, err := os.Stat(filepath.Join(pgdata, standbyFile))
	return err == nil
}

// writeStandbySignal makes the next start of the server a standby's.
func writeStandbySignal(pgdata string) error {
	if err := os.WriteFile(filepath.Join(pgdata, standbyFile), nil, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", standbyFile, err)
	}
	return nil
}

// ensureReplicationHBA appends replicationHBA and rewindHBA to the data
// directory's pg_hba.conf unless lines already say them; changed says it
// appended.
func ensureReplicationHBA(pgdata string) (changed bool, err error) {
	path := filepath.Join(pgdata, hbaFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return false, fmt.Errorf("reading %s: %w", hbaFile, err)
	}
	have := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		have[strings.Join(strings.Fields(line), " ")] = true
	}
	var add strings.Builder
	if !have[strings.Join(strings.Fields(replicationHBA), " ")] {
		fmt.Fprintf(&add, "\n# dbkeeper: standbys stream as %s\n%s\n", agentapi.ReplicationUser, replicationHBA)
	}
	if !have[strings.Join(strings.Fields(rewindHBA), " ")] {
		fmt.Fprintf(&add, "\n# dbkeeper: a former primary's pg_rewind reads as %s\n%s\n", agentapi.ReplicationUser, rewindHBA)
	}
	if add.Len() == 0 {
		return false, nil
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return false, fmt.Errorf("writing %s: %w", hbaFile, err)
	}
	_, err = f.WriteString(add.String())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("writing %s: %w", hbaFile, err)
	}
	return true, nil
}

// writePgpass writes a 0600 password file for ReplicationUser (libpq's
// passfile) under the temporary directory and returns its path.
func writePgpass(password string) (string, error) {
	f, err := os.CreateTemp("", "dbkeeper-pgpass-")
	if err != nil {
		return "", fmt.Errorf("writing the replication password file: %w", err)
	}
	esc := strings.NewReplacer(`\`, `\\`, `:`, `\:`)
	_, err = fmt.Fprintf(f, "*:*:*:%s:%s\n", agentapi.ReplicationUser, esc.Replace(password))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o600)
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("writing the replication password file: %w", err)
	}
	return f.Name(), nil
}

// conninfoValue quotes v for a libpq keyword/value string.
func conninfoValue(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// slotPrefix begins the name of every slot the replication controller
// makes (SlotName).
const slotPrefix = "dbkeeper_"

// dropStandbySlots removes, from a stopped server's data directory, the
// replication slots it kept for its standbys while it was a primary. A
// standby never advances them, so they would keep WAL on its volume (up to
// max_slot_wal_keep_size) and, once invalidated, stay behind when it is
// promoted again, where the standby of the same name could no longer
// stream from them. The replication controller makes fresh ones on
// whichever instance is the primary. It returns the slots removed.
func dropStandbySlots(pgdata string) ([]string, error) {
	dir := filepath.Join(pgdata, "pg_replslot")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", dir, err)
	}
	var dropped []string
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), slotPrefix) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return dropped, fmt.Errorf("removing the slot %s: %w", e.Name(), err)
		}
		dropped = append(dropped, e.Name())
	}
	return dropped, nil
}

// slotWALCap is max_slot_wal_keep_size for a data volume of size bytes:
// a quarter of it, at least one 16 MB segment. A standby's slot keeps WAL
// on the primary until the standby received it, in pg_wal on this same
// volume, so a standby gone for long would otherwise fill the primary's
// disk and stop it; past the cap the slot is invalidated and that standby
// is cloned again, which costs far less. A quarter leaves three quarters
// to the data and to max_wal_size (1 GB by default), and still holds
// hours of WAL at ordinary write rates, enough for a pod to restart or a
// node to drain. It is read from the volume at each start, so a grown
// volume raises it without a change to the pod template.
func slotWALCap(size uint64) string {
	const mb = 1 << 20
	return strconv.FormatUint(max(size/4/mb, 16), 10) + "MB"
}

// volumeFullBelow is the free space under which the data volume is full:
// a few WAL segments and a checkpoint's worth.
const volumeFullBelow = 64 << 20

// volumeAvailable is the space unprivileged writers may still use on the
// filesystem that holds dir.
func volumeAvailable(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// volumeSize is the size in bytes of the filesystem that holds dir.
func volumeSize(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return st.Blocks * uint64(st.Bsize), nil
}

// removeStalePidFile removes the data directory's postmaster.pid when the
// process it names is not a postgres process: a server killed with its
// container (an agent SIGKILL, an OOM kill) leaves it behind, and in the
// next container its pid may belong to any process, such as one of the
// agent's own threads, which postgres would take for a running server
// ("lock file already exists") and refuse to start. The agent owns the
// data directory alone (PID 1 of the only container that mounts it), and
// calls this only while it runs no server.
func removeStalePidFile(pgdata string) (bool, error) {
	pid := postmasterPID(pgdata)
	if pid == 0 {
		return false, nil
	}
	if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(comm)) == "postgres" {
		return false, nil
	}
	if err := os.Remove(filepath.Join(pgdata, "postmaster.pid")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("removing the stale postmaster.pid: %w", err)
	}
	return true, nil
}

// clearStalePidFile is removeStalePidFile on the agent's data directory,
// logged; call it only while the agent runs no server.
func (a *Agent) clearStalePidFile() error {
	removed, err := removeStalePidFile(a.cfg.PGData)
	if removed {
		a.log.Info("Removed a stale postmaster.pid")
	}
	return err
}

// hasRecoverySignal says whether the data directory is in targeted
// recovery (recovery.signal: a restore that has not been promoted yet).
func hasRecoverySignal(pgdata string) bool {
	_, err := os.Stat(filepath.Join(pgdata, "recovery.signal"))
	return err == nil
}
