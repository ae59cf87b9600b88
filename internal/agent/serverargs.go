package agent

import (
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// serverArgs is the image's command with the port, the socket directory
// and, for a standby, where and how to stream from.
func (a *Agent) serverArgs() []string {
	args := append([]string{}, a.cfg.Command...)
	args = append(args, "-c", "port="+strconv.Itoa(a.cfg.Port), "-c", "unix_socket_directories="+a.cfg.SocketDir)
	args = append(args, a.certAuthArgs()...)
	if a.commandSets("max_slot_wal_keep_size") {
		// the command's own setting wins (tests make slots lose WAL)
	} else if size, err := volumeSize(filepath.Dir(a.cfg.PGData)); err == nil {
		args = append(args, "-c", "max_slot_wal_keep_size="+slotWALCap(size))
	} else {
		a.log.Error(err, "Cannot size the data volume: max_slot_wal_keep_size stays unlimited")
	}
	if isStandby(a.cfg.PGData) {
		args = append(args,
			"-c", "primary_conninfo="+a.primaryConninfo(),
			"-c", "primary_slot_name="+agentapi.SlotName(a.cfg.Pod))
		if !a.commandSets("wal_retrieve_retry_interval") {
			args = append(args, "-c", "wal_retrieve_retry_interval="+walRetrieveRetryInterval)
		}
	}
	args = append(args, a.archiveSettings()...)
	return append(args, a.recoveryArgs()...)
}

// walRetrieveRetryInterval is how long a standby's startup process waits
// before it starts a WAL receiver again (PostgreSQL's default is 5 s):
// after a failover a detached standby reaches the new primary on its next
// attempt, and in synchronous mode every commit waits for it.
const walRetrieveRetryInterval = "1s"

// serverSettings are the -c settings of the server's command
// (wal_log_hints among them, which pg_rewind needs recorded in pg_control).
func (a *Agent) serverSettings() []string {
	var out []string
	for i, arg := range a.cfg.Command {
		if arg == "-c" && i+1 < len(a.cfg.Command) {
			out = append(out, "-c", a.cfg.Command[i+1])
		}
	}
	return out
}

// commandSets says whether the server's command sets the setting name
// with -c.
func (a *Agent) commandSets(name string) bool {
	settings := a.serverSettings()
	for i := 1; i < len(settings); i += 2 {
		if k, _, _ := strings.Cut(settings[i], "="); strings.TrimSpace(k) == name {
			return true
		}
	}
	return false
}
