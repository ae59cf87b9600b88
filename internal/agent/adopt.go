package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// takeHandover reads the handover an agent that replaced itself left
// ($DBKEEPER_HANDOVER) and marks the adoption begun (handoverFailedFile);
// nil when there is none to adopt. A handover whose adoption began
// before (the agent restarted while adopting) or cannot be read is
// ignored and removed: the agent starts the server as after a restart,
// and its status says why (lastTakeover).
func (a *Agent) takeHandover() *handover {
	path := os.Getenv(agentapi.EnvHandover)
	if path == "" && a.self != "" {
		// a restarted container's environment names no handover: a marker
		// says one was not adopted.
		file, failed := handoverPaths(a.self)
		if _, err := os.Stat(failed); err == nil {
			a.ignoreHandover(file, "the agent restarted while adopting the running server after an in-place takeover: the server started anew")
		}
		return nil
	}
	if path == "" {
		return nil
	}
	failed := failedMarker(path)
	if _, err := os.Stat(failed); err == nil {
		a.ignoreHandover(path, "the agent restarted while adopting the running server after an in-place takeover: the server started anew")
		return nil
	}
	h, err := readHandover(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // adopted before: this start is a restart with the same environment
	}
	if err != nil {
		a.ignoreHandover(path, err.Error())
		return nil
	}
	if err := writeSynced(failed, []byte(strconv.Itoa(os.Getpid())+"\n")); err != nil {
		a.ignoreHandover(path, fmt.Sprintf("cannot mark the adoption begun: %s", err))
		return nil
	}
	return &h
}

// ignoreHandover removes the handover file path and its marker and
// reports why the agent does not adopt it.
func (a *Agent) ignoreHandover(path, why string) {
	r := &agentapi.TakeoverReport{At: time.Now(), Message: why}
	if h, err := readHandover(path); err == nil {
		r.From, r.At = h.From, h.At
	}
	_ = os.Remove(path)
	_ = os.Remove(failedMarker(path))
	a.log.Info("Not adopting a server after an in-place takeover: starting it as after a restart", "why", why)
	a.mu.Lock()
	a.lastTakeover = r
	a.mu.Unlock()
}

// adopt makes the running server h describes the agent's own, as if it
// had started it: it checks that it is the agent's child and the data
// directory's postmaster, copies its output from the passed pipes (and
// the collector's), waits for its exit and, once it answers, reports it
// Running and removes the handover. The caller holds a.op, which it
// keeps until then (an error: nothing adopted, a.op still held).
func (a *Agent) adopt(h *handover) error {
	if err := checkAdoptable(*h, a.cfg.PGData, os.Getpid()); err != nil {
		return err
	}
	files, err := handedFiles(h.Output)
	if err != nil {
		return err
	}
	p, err := os.FindProcess(h.PID)
	if err != nil {
		return fmt.Errorf("adopting the server: %w", err)
	}
	var env *envelope
	var col *collector
	if h.CollectorDir != "" {
		col = reopenCollector(h.CollectorDir)
		e := a.logEnvelope()
		env = &e
	}
	output := &outputTail{done: make(chan struct{}), collector: col}
	output.copy(files, os.Stdout, os.Stderr, env)
	// an exec.Cmd whose Wait waits for pid, as for a server it started
	cmd := &exec.Cmd{Path: a.cfg.Command[0], Args: a.cfg.Command, Process: p}
	srv := &server{cmd: cmd, done: make(chan struct{}), output: output, accepted: h.Accepted}
	a.reaper.adopt(h.PID)
	a.mu.Lock()
	a.srv, a.lastOutput = srv, output
	a.state, a.message = agentapi.StateStarting, "adopting the running server after an in-place takeover"
	a.mu.Unlock()
	a.log.Info("Adopted the running server after an in-place takeover", "pid", h.PID, "from", h.From, "jsonLog", col != nil)
	go a.watchExit(srv)
	go a.watchAdopted(srv, *h)
	return nil
}

// checkAdoptable says why the server of h cannot be adopted by the agent
// (pid self) of data directory pgdata, nil when it can: it is self's
// child, pgdata's postmaster, and of the role h says.
func checkAdoptable(h handover, pgdata string, self int) error {
	ppid, err := parentOf(h.PID)
	if err != nil {
		return fmt.Errorf("adopting the server: %w", err)
	}
	if ppid != self {
		return fmt.Errorf("adopting the server: process %d is not the agent's child (its parent is %d)", h.PID, ppid)
	}
	if pm := postmasterPID(pgdata); pm != h.PID {
		return fmt.Errorf("adopting the server: process %d is not the data directory's postmaster (postmaster.pid says %d)", h.PID, pm)
	}
	if isStandby(pgdata) != h.Standby {
		return fmt.Errorf("adopting the server: the data directory's role changed since the handover")
	}
	return nil
}

// parentOf is the parent pid of process pid, from /proc.
func parentOf(pid int) (int, error) {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, fmt.Errorf("reading process %d: %w", pid, err)
	}
	// "pid (comm) S ppid ...": comm may hold anything
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 2 {
		return 0, fmt.Errorf("reading process %d: no parent in %q", pid, s)
	}
	if fields[0] == "Z" {
		return 0, fmt.Errorf("process %d exited", pid)
	}
	return strconv.Atoi(fields[1])
}

// handedFiles are the pipes' read ends passed open across the exec, by
// fd number; each must be a pipe.
func handedFiles(fds []int) ([]*os.File, error) {
	var files []*os.File
	for i, fd := range fds {
		var st syscall.Stat_t
		err := syscall.Fstat(fd, &st)
		if err == nil && st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
			err = fmt.Errorf("fd %d is not a pipe", fd)
		}
		if err != nil {
			for _, f := range files {
				_ = f.Close()
			}
			return nil, fmt.Errorf("adopting the server: the server's output: %w", err)
		}
		syscall.CloseOnExec(fd)
		files = append(files, os.NewFile(uintptr(fd), []string{"server-stdout", "server-stderr"}[i]))
	}
	return files, nil
}

// reopenCollector is a collector of the pipes the running server's
// logging collector writes, in dir (made by newCollector at its start).
func reopenCollector(dir string) *collector {
	return &collector{dir: dir, queue: newOutputQueue(outputQueueLimit),
		stderrFile: newFIFOReader(filepath.Join(dir, logFileName)),
		jsonFile:   newFIFOReader(filepath.Join(dir, jsonLogFileName))}
}

// watchAdopted marks the agent as the handover said (Running) once the
// adopted server answers, and then removes the handover and its marker.
func (a *Agent) watchAdopted(srv *server, h handover) {
	defer a.op.Unlock()
	// the readers read the collector's pipes by now
	defer closeFDs(h.CollectorFDs)
	for {
		if a.ping(a.ctx) == nil {
			break
		}
		select {
		case <-srv.done:
			return
		case <-a.ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	a.mu.Lock()
	if a.srv == srv && a.state == agentapi.StateStarting {
		a.state, a.message = h.State, ""
	}
	a.lastTakeover = &agentapi.TakeoverReport{From: h.From, At: h.At, Adopted: true}
	a.mu.Unlock()
	path, _ := handoverPaths(a.self)
	if p := os.Getenv(agentapi.EnvHandover); p != "" {
		path = p
	}
	_ = os.Remove(path)
	_ = os.Remove(failedMarker(path))
	a.log.Info("The adopted server answers: the takeover is done", "from", h.From, "after", time.Since(h.At).Round(time.Millisecond))
	a.pokeArchive()
}
