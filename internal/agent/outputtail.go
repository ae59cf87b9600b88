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
// container's log). Each stream has its own tail: the server's log lines
// (stderr) are not pushed out of the tail by a burst on stdout copied
// after them (CI saw a FATAL on stderr lost behind 64 KB of stdout still
// in its pipe).
type outputTail struct {
	mu sync.Mutex
	// bufs are the ends of stdout and stderr.
	bufs [2][]byte
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
	for i, dst := range []io.Writer{stdout, stderr} {
		r, w, err := os.Pipe()
		if err != nil {
			t.closeWriters()
			return nil, fmt.Errorf("making a pipe for the server's output: %w", err)
		}
		t.writers = append(t.writers, w)
		copies.Go(func() {
			defer r.Close()
			_, _ = io.Copy(io.MultiWriter(streamTail{t, i}, dst), r)
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

// streamTail is the writer of one stream's tail (0 stdout, 1 stderr).
type streamTail struct {
	t      *outputTail
	stream int
}

// Write keeps the last outputTailSize bytes (at least) of what was written.
func (s streamTail) Write(p []byte) (int, error) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	buf := append(s.t.bufs[s.stream], p...)
	if len(buf) > 2*outputTailSize {
		buf = append(buf[:0], buf[len(buf)-outputTailSize:]...)
	}
	s.t.bufs[s.stream] = buf
	return len(p), nil
}

// lines is what the tail holds, stdout's then stderr's (where the
// server's log lines go), once every process closed the pipes or wait
// passed.
func (t *outputTail) lines(wait time.Duration) string {
	select {
	case <-t.done:
	case <-time.After(wait):
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	out := string(t.bufs[0])
	if out != "" && !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	return out + string(t.bufs[1])
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
