package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// pauseWait bounds how long a takeover waits for the copies of the
// server's output to stop and their lines to be written.
const pauseWait = time.Second

// pause stops the copies of the server's output for a takeover, where
// they are: the pipes' read ends stay open (the exec passes them on) and
// what the server writes meanwhile waits in the pipes for the new agent.
// It waits up to wait for the copies to stop and for the lines read to be
// written. A line the server was writing as they stopped is cut in two.
func (t *outputTail) pause(wait time.Duration) {
	t.paused.Store(true)
	for _, r := range t.readers {
		_ = r.SetReadDeadline(time.Now())
	}
	if t.collector != nil {
		t.collector.stderrFile.pause()
		t.collector.jsonFile.pause()
	}
	select {
	case <-t.done:
	case <-time.After(wait):
	}
	t.flushed(wait)
}

// pause ends the reader at once, its pipe closed (a takeover holds it
// open meanwhile: holdFIFOs).
func (r *fifoReader) pause() {
	r.paused.Store(true)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f != nil {
		_ = r.f.SetReadDeadline(time.Now())
	}
}

// holdFIFOs opens the logging collector's pipes in dir for reading and
// writing, left open across an exec, so that they never lack a reader
// while the agent replaces itself: the collector's writes would fail
// (EPIPE) and its lines be lost. It returns their fds.
func holdFIFOs(dir string) ([]int, error) {
	var fds []int
	for _, name := range []string{logFileName, jsonLogFileName} {
		// no O_CLOEXEC: the new agent closes them once its readers read
		fd, err := syscall.Open(filepath.Join(dir, name), syscall.O_RDWR|syscall.O_NONBLOCK, 0)
		if err != nil {
			closeFDs(fds)
			return nil, fmt.Errorf("holding the server's log pipes: %w", err)
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// closeFDs closes fds.
func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = syscall.Close(fd)
	}
}

// resumeOutput copies srv's output again after a takeover that failed
// paused it: the same pipes, the collector's reopened, the tail kept.
func (a *Agent) resumeOutput(srv *server) {
	old := srv.output
	for _, r := range old.readers {
		_ = r.SetReadDeadline(time.Time{})
	}
	var env *envelope
	var col *collector
	if old.collector != nil {
		col = reopenCollector(old.collector.dir)
		e := a.logEnvelope()
		env = &e
	}
	t := &outputTail{done: make(chan struct{}), collector: col}
	old.mu.Lock()
	t.bufs = old.bufs
	old.mu.Unlock()
	t.copy(old.readers, os.Stdout, os.Stderr, env)
	a.mu.Lock()
	srv.output = t
	if a.lastOutput == old {
		a.lastOutput = t
	}
	a.mu.Unlock()
}
