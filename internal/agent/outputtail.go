package agent

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// outputTailSize is how much of a server's output the agent keeps: its
// last lines, which say why it exited.
const outputTailSize = 32 << 10

// outputTail is the end of what one run of the server wrote to its stdout
// and stderr, each of which goes on unchanged to the agent's own (the
// container's log).
type outputTail struct {
	mu  sync.Mutex
	buf []byte
	// writers are the agent's copies of the pipes' write ends.
	writers []*os.File
	// done is closed once every process that held the pipes closed them.
	done chan struct{}
}

// teeOutput gives cmd's stdout and stderr to pipes copied both to stdout
// and stderr (the agent's own) and to the returned tail. The copies go on
// as long as any process holds the pipes, without delaying cmd's Wait; the
// caller closes the agent's ends once cmd started (or will not).
func teeOutput(cmd *exec.Cmd, stdout, stderr io.Writer) (*outputTail, error) {
	t := &outputTail{done: make(chan struct{})}
	var copies sync.WaitGroup
	for _, dst := range []io.Writer{stdout, stderr} {
		r, w, err := os.Pipe()
		if err != nil {
			t.closeWriters()
			return nil, fmt.Errorf("making a pipe for the server's output: %w", err)
		}
		t.writers = append(t.writers, w)
		copies.Go(func() {
			defer r.Close()
			_, _ = io.Copy(io.MultiWriter(t, dst), r)
		})
	}
	go func() { copies.Wait(); close(t.done) }()
	cmd.Stdout, cmd.Stderr = t.writers[0], t.writers[1]
	return t, nil
}

// closeWriters closes the agent's ends of the pipes.
func (t *outputTail) closeWriters() {
	for _, w := range t.writers {
		_ = w.Close()
	}
}

// Write keeps the last outputTailSize bytes (at least) of what was written.
func (t *outputTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*outputTailSize {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-outputTailSize:]...)
	}
	return len(p), nil
}

// lines is what the tail holds, once every process closed the pipes or
// wait passed.
func (t *outputTail) lines(wait time.Duration) string {
	select {
	case <-t.done:
	case <-time.After(wait):
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// exitLine is the line of a server's output that says why it exited, from
// its severity on: the last PANIC, else the last FATAL other than a
// refused connection's ("the database system is starting up", which the
// agent's own attempts to connect leave); "" when there is none. Its
// blanks are folded (severityLine keeps them).
func exitLine(out string) string {
	return strings.Join(strings.Fields(severityLine(out)), " ")
}

// severityLine is exitLine as the server wrote it.
func severityLine(out string) string {
	lines := strings.Split(out, "\n")
	for _, sev := range []string{"PANIC:", "FATAL:"} {
		for i := len(lines) - 1; i >= 0; i-- {
			j := strings.Index(lines[i], sev)
			if j < 0 {
				continue
			}
			if l := strings.TrimSpace(lines[i][j:]); !strings.HasPrefix(strings.Join(strings.Fields(l), " "), "FATAL: the database system is ") {
				return l
			}
		}
	}
	return ""
}
