package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// serverArgs is the image's command with the port, the socket directory
// and, for a standby, where and how to stream from and the settings it
// may not have lower than its primary's (standbyFloorArgs).
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
		args = append(args, a.standbyFloorArgs()...)
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

// standbyFloorSettings are the settings PostgreSQL refuses to start a
// standby with lower than its primary's ("recovery aborted because of
// insufficient parameter settings"), each with the line of pg_controldata
// that says the primary's (pg_control holds the values of the primary's
// last start, replayed from its WAL).
var standbyFloorSettings = []standbyFloorSetting{
	{"max_connections", "max_connections setting"},
	{"max_worker_processes", "max_worker_processes setting"},
	{"max_wal_senders", "max_wal_senders setting"},
	{"max_prepared_transactions", "max_prepared_xacts setting"},
	{"max_locks_per_transaction", "max_locks_per_xact setting"},
}

// standbyFloorSetting is a setting's name and pg_controldata's line for
// it.
type standbyFloorSetting struct{ name, control string }

// standbyFloor is a setting a standby starts with raised to its
// primary's.
type standbyFloor struct {
	name                string
	configured, primary int
}

// standbyFloors decides which of standbyFloorSettings a standby starts
// with raised: those its configuration sets lower than pg_control.
// configured holds, by name, what the server computes from its
// configuration (postgres -C); control holds pg_controldata's fields. A
// setting with either value missing or not a number is unread, and
// raised by nothing.
func standbyFloors(configured, control map[string]string) (raise []standbyFloor, unread []string) {
	for _, s := range standbyFloorSettings {
		c, errC := strconv.Atoi(strings.TrimSpace(configured[s.name]))
		p, errP := strconv.Atoi(strings.TrimSpace(control[s.control]))
		switch {
		case errC != nil || errP != nil:
			unread = append(unread, s.name)
		case c < p:
			raise = append(raise, standbyFloor{name: s.name, configured: c, primary: p})
		}
	}
	return raise, unread
}

// standbyFloorArgs are the -c settings that raise, for this standby's
// start, each of standbyFloorSettings its configuration (files and
// command) sets lower than its primary's in pg_control: a parameter
// lowered on the primary and the standby alike, which the standby read
// first, does not keep it from starting (PostgreSQL would refuse to). A
// setting whose value cannot be read is logged and left alone.
func (a *Agent) standbyFloorArgs() []string {
	if !hasCluster(a.cfg.PGData) {
		return nil
	}
	control, err := a.controlData(a.ctx)
	if err != nil {
		a.log.Error(err, "Cannot read pg_control: this standby starts with its own max_connections, max_worker_processes, max_wal_senders, max_prepared_transactions and max_locks_per_transaction")
		return nil
	}
	configured := map[string]string{}
	failed := map[string]error{}
	for _, s := range standbyFloorSettings {
		v, err := a.configuredSetting(s.name)
		if err != nil {
			failed[s.name] = err
			continue
		}
		configured[s.name] = v
	}
	raise, unread := standbyFloors(configured, control)
	for _, s := range standbyFloorSettings {
		if !slices.Contains(unread, s.name) {
			continue
		}
		err := failed[s.name]
		if err == nil {
			err = fmt.Errorf("the server computes %q, pg_controldata says %q", configured[s.name], control[s.control])
		}
		a.log.Error(err, "Cannot compare a setting of this standby with its primary's: starting with its own", "setting", s.name)
	}
	var args []string
	for _, f := range raise {
		a.log.Info("Raising a setting of this standby to its primary's: PostgreSQL does not start a standby with less",
			"setting", f.name, "configured", f.configured, "primary", f.primary)
		args = append(args, "-c", f.name+"="+strconv.Itoa(f.primary))
	}
	return args
}

// configuredSetting is the value the server computes for name from its
// configuration files and its command's -c settings (postgres -C).
func (a *Agent) configuredSetting(name string) (string, error) {
	ctx, cancel := context.WithTimeout(a.ctx, queryTimeout)
	defer cancel()
	out, err := a.run(ctx, "postgres", append([]string{"-C", name, "-D", a.cfg.PGData}, a.serverSettings()...), nil)
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1], nil
}
