package agent

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// outputTailSize is how much of a server's output the agent keeps: its
// last lines, which say why it exited.
const outputTailSize = 32 << 10

// outputTail is the end of what one run of the server wrote to its stdout
// and stderr, each of which goes on to the agent's own (the container's
// log), and, from PostgreSQL 15 on, of what its logging collector wrote
// (collector). Each stream has its own tail: the server's log lines
// (stderr) are not pushed out of the tail by a burst on stdout copied
// after them (CI saw a FATAL on stderr lost behind 64 KB of stdout still
// in its pipe).
type outputTail struct {
	mu sync.Mutex
	// bufs are the ends of stdout, stderr and the collector's records (as
	// text lines).
	bufs [3][]byte
	// writers are the agent's copies of the pipes' write ends; readers
	// their read ends, which a takeover passes to the new agent.
	writers []*os.File
	readers []*os.File
	// paused says the copies stopped for a takeover (pause): they leave
	// the readers open.
	paused atomic.Bool
	// done is closed once every process that held the pipes closed them
	// and the collector's readers ended.
	done chan struct{}
	// collector reads the logging collector's pipes; nil: none.
	collector *collector
}

// The streams of an outputTail.
const (
	streamStdout = iota
	streamStderr
	streamCollector
)

// teeOutput gives cmd's stdout and stderr to pipes copied both to stdout
// and stderr (the agent's own) and to the returned tail. The copies go on
// as long as any process holds the pipes, without delaying cmd's Wait; the
// caller closes the agent's ends once cmd started (or will not).
func teeOutput(cmd *exec.Cmd, stdout, stderr io.Writer) (*outputTail, error) {
	return teeServerOutput(cmd, stdout, stderr, nil, nil)
}

// teeServerOutput is teeOutput for a server that logs JSON lines of env
// (env set): each line of its stdout and stderr goes on as one, and col
// (when set) reads its logging collector's pipes into stdout and the
// tail's collector stream until serverExited. Without env, the bytes go
// on as they are.
func teeServerOutput(cmd *exec.Cmd, stdout, stderr io.Writer, env *envelope, col *collector) (*outputTail, error) {
	t := &outputTail{done: make(chan struct{}), collector: col}
	var readers []*os.File
	for range 2 {
		r, w, err := os.Pipe()
		if err != nil {
			t.closeWriters()
			for _, r := range readers {
				_ = r.Close()
			}
			return nil, fmt.Errorf("making a pipe for the server's output: %w", err)
		}
		t.writers = append(t.writers, w)
		readers = append(readers, r)
	}
	t.copy(readers, stdout, stderr, env)
	cmd.Stdout, cmd.Stderr = t.writers[0], t.writers[1]
	return t, nil
}

// copy copies readers, the read ends of the server's stdout and stderr,
// to stdout and stderr and to the tail (as teeServerOutput says), and
// starts the collector's readers; each reader is closed once every
// writer closed its pipe.
func (t *outputTail) copy(readers []*os.File, stdout, stderr io.Writer, env *envelope) {
	t.readers = readers
	var copies sync.WaitGroup
	for i, dst := range []io.Writer{stdout, stderr} {
		r := readers[i]
		copies.Go(func() {
			defer func() {
				if !t.paused.Load() {
					_ = r.Close()
				}
			}()
			if env == nil {
				_, _ = io.Copy(io.MultiWriter(streamTail{t, i}, dst), r)
				return
			}
			msg := []string{msgStdout, msgStderr}[i]
			_ = readLines(r, maxLogLine, func(line []byte) {
				if len(line) == 0 {
					return // the entrypoint's blank lines
				}
				t.add(i, string(line)+"\n")
				_, _ = dst.Write(env.text(time.Now(), msg, line))
			})
		})
	}
	if t.collector != nil && env != nil {
		t.collector.start(t, *env, stdout, &copies)
	}
	go func() { copies.Wait(); close(t.done) }()
}

// serverExited has the collector's readers end once the collector closed
// its pipes: no server opens them again. The caller calls it once the
// server exited, or will not start.
func (t *outputTail) serverExited() {
	if t.collector != nil {
		t.collector.stop()
	}
}

// flushed waits up to wait for the collector's lines to reach stdout.
func (t *outputTail) flushed(wait time.Duration) {
	if t.collector != nil {
		t.collector.flushed(wait)
	}
}

// closeWriters closes the agent's ends of the pipes.
func (t *outputTail) closeWriters() {
	for _, w := range t.writers {
		_ = w.Close()
	}
}

// streamTail is the writer of one stream's tail.
type streamTail struct {
	t      *outputTail
	stream int
}

// Write keeps the last outputTailSize bytes (at least) of what was written.
func (s streamTail) Write(p []byte) (int, error) {
	s.t.add(s.stream, string(p))
	return len(p), nil
}

// add appends text to stream's tail, which keeps its last outputTailSize
// bytes (at least).
func (t *outputTail) add(stream int, text string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	buf := append(t.bufs[stream], text...)
	if len(buf) > 2*outputTailSize {
		buf = append(buf[:0], buf[len(buf)-outputTailSize:]...)
	}
	t.bufs[stream] = buf
}

// lines is what the tail holds, stdout's, then stderr's (where the
// server's log lines go before its logging collector starts, and all of
// them before PostgreSQL 15), then the collector's, once every process
// closed the pipes and the collector's readers ended, or wait passed.
func (t *outputTail) lines(wait time.Duration) string {
	select {
	case <-t.done:
	case <-time.After(wait):
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var out strings.Builder
	for _, b := range t.bufs {
		out.Write(b)
		if len(b) > 0 && b[len(b)-1] != '\n' {
			out.WriteByte('\n')
		}
	}
	return out.String()
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
