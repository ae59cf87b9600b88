package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// From PostgreSQL 15 on, the server logs through its logging collector as
// jsonlog (one JSON object a line) into a named pipe the agent reads, not
// into a file: nothing is kept on a volume, every record reaches the
// container's log as one JSON line (logrecord.go), and the agent still
// reads the server's last lines (the output's tail) to say why it stopped.
// The collector writes two files of log_directory: log_filename's (the
// stderr file, postgres.log, where what the server's children write
// without the log protocol goes) and, for jsonlog, the same name with
// .json in place of .log (postgres.json). Both are pipes: the postmaster
// opens each before it forks the collector, and a pipe's open waits for a
// reader, so the agent reads both from before the server starts until the
// collector closes them after the server exited.

// jsonLogMajor is the first major version of PostgreSQL with jsonlog.
const jsonLogMajor = 15

// logDirName is the directory of the collector's pipes under the temporary
// directory ($TMPDIR, else /tmp: an emptyDir in the pod). The pipes hold
// nothing (the collector's writes wait for the agent's reads), and the
// agent makes them again before each start of the server: nothing needs
// to outlive the agent.
const logDirName = "dbkeeper-pglog"

// logFileName is log_filename; the collector's stderr file is named so,
// its jsonlog file has .json for .log.
const logFileName = "postgres.log"

// jsonLogFileName is the collector's jsonlog file.
const jsonLogFileName = "postgres.json"

// maxLogLine bounds a line of the server's output the agent handles as
// one: a longer one comes in pieces (a piece of a record is no record: it
// is written as a line of text).
const maxLogLine = 1 << 20

// outputQueueLimit bounds the bytes of JSON lines that wait for the
// agent's stdout: past it, records are dropped (and counted) rather than
// making the collector, and so every backend that logs, wait for a slow
// container log.
const outputQueueLimit = 4 << 20

// collectorArgs are the settings that make the server log jsonlog into
// the pipes of dir, never rotating or truncating them (rotation would
// name other files, which no one reads).
func collectorArgs(dir string) []string {
	return []string{
		"-c", "logging_collector=on",
		"-c", "log_destination=jsonlog",
		"-c", "log_directory=" + dir,
		"-c", "log_filename=" + logFileName,
		"-c", "log_rotation_age=0",
		"-c", "log_rotation_size=0",
		"-c", "log_truncate_on_rotation=off",
	}
}

// collector reads the pipes of one start of the server.
type collector struct {
	dir string
	// stderrFile and jsonFile read the collector's stderr and jsonlog
	// files.
	stderrFile, jsonFile *fifoReader
	queue                *outputQueue
}

// newCollector makes dir and the collector's pipes in it, new (a pipe
// left by an earlier start is removed first).
func newCollector(dir string) (*collector, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("making the server's log directory: %w", err)
	}
	c := &collector{dir: dir, queue: newOutputQueue(outputQueueLimit)}
	for _, p := range []struct {
		r    **fifoReader
		name string
	}{{&c.stderrFile, logFileName}, {&c.jsonFile, jsonLogFileName}} {
		path := filepath.Join(dir, p.name)
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("making the server's log pipe: %w", err)
		}
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			return nil, fmt.Errorf("making the server's log pipe %s: %w", path, err)
		}
		*p.r = newFIFOReader(path)
	}
	return c, nil
}

// start reads both pipes until stop, each in a goroutine that wg counts:
// each record or line goes to t's collector stream (as text) and, as a
// JSON line of env, to stdout through the queue.
func (c *collector) start(t *outputTail, env envelope, stdout io.Writer, wg *sync.WaitGroup) {
	var readers sync.WaitGroup
	for _, r := range []*fifoReader{c.stderrFile, c.jsonFile} {
		handle := func(line []byte) {
			if len(line) == 0 {
				return
			}
			var out []byte
			tail := string(line) + "\n"
			if r == c.jsonFile {
				out, tail = env.record(time.Now(), line)
			} else {
				out = env.text(time.Now(), msgStderr, line)
			}
			t.add(streamCollector, tail)
			c.queue.push(out)
		}
		wg.Add(1)
		readers.Add(1)
		go func() {
			defer wg.Done()
			defer readers.Done()
			r.run(handle, func(err error) {
				c.queue.push(env.text(time.Now(), msgStderr, []byte("dbkeeper: "+err.Error())))
			})
		}()
	}
	go func() { readers.Wait(); c.queue.close() }()
	go c.queue.run(stdout, func(n int) []byte { return env.dropped(time.Now(), n) })
}

// stop has the readers end once the collector closed the pipes (at once
// when it never opened them: the server did not start, or stopped before
// its collector did). The server has exited: no collector opens them
// again.
func (c *collector) stop() {
	c.stderrFile.stop()
	c.jsonFile.stop()
}

// flushed waits up to wait for every line read to be written.
func (c *collector) flushed(wait time.Duration) {
	select {
	case <-c.queue.flushed:
	case <-time.After(wait):
	}
}

// fifoReader reads a named pipe, whoever writes to it and however often
// its writers change (the collector restarted), until stop.
type fifoReader struct {
	path string
	mu   sync.Mutex
	// stopped says the reader ends once the pipe has been quiet for
	// stopIdle (or stopWait after stop); stoppedAt is when.
	stopped   bool
	stoppedAt time.Time
	// f is the pipe while the reader has it open.
	f *os.File
	// stopCh is closed by stop; paused ends the reader at once (pause).
	stopCh chan struct{}
	paused atomic.Bool
	done   chan struct{}
}

// newFIFOReader reads the named pipe path (which must exist).
func newFIFOReader(path string) *fifoReader {
	return &fifoReader{path: path, stopCh: make(chan struct{}), done: make(chan struct{})}
}

// fifoRetry is how long a reader that could not open or read its pipe
// waits before it tries again: a pipe nobody reads would stop the server.
const fifoRetry = time.Second

// stopIdle is how long a stopped reader waits for more lines (the
// collector writes its last ones as the server exits); stopWait bounds
// the whole wait after stop.
const (
	stopIdle = time.Second
	stopWait = 5 * time.Second
)

// run calls handle with each line written to the pipe until stop; it
// reports an error to failed and tries again after fifoRetry. The pipe is
// open for reading and writing: the reader holds a write end of its own,
// so the pipe never reads as ended between two writers and never drops
// what a writer left in it (with a read end only, the lines of a writer
// that opened the pipe after the reader saw the last one close, and
// before the reader closed it, went with that close: CI's
// TestCollectorOutput lost two of three records), and no writer waits for
// the reader to open it.
func (r *fifoReader) run(handle func([]byte), failed func(error)) {
	defer close(r.done)
	for !r.paused.Load() {
		f, err := os.OpenFile(r.path, os.O_RDWR, 0)
		if err == nil {
			r.mu.Lock()
			r.f = f
			if r.paused.Load() {
				_ = f.SetReadDeadline(time.Now())
			}
			stopped := r.stopped
			r.mu.Unlock()
			if stopped {
				r.quietFor(f)
			}
			err = readLines(f, maxLogLine, func(line []byte) {
				handle(line)
				r.mu.Lock()
				if r.stopped {
					r.quietFor(f)
				}
				r.mu.Unlock()
			})
			r.mu.Lock()
			r.f = nil
			stopped = r.stopped
			r.mu.Unlock()
			_ = f.Close()
			if r.paused.Load() {
				return
			}
			if stopped && (err == nil || errors.Is(err, os.ErrDeadlineExceeded)) {
				return
			}
		}
		if err == nil {
			err = errors.New("the pipe ended")
		}
		failed(fmt.Errorf("reading the server's log %s: %w", r.path, err))
		select {
		case <-r.stopCh:
			return
		case <-time.After(fifoRetry):
		}
	}
}

// quietFor (under r.mu, once stopped) has the read of f end after stopIdle
// without a line, and at stopWait after stop at the latest.
func (r *fifoReader) quietFor(f *os.File) {
	deadline := time.Now().Add(stopIdle)
	if last := r.stoppedAt.Add(stopWait); last.Before(deadline) {
		deadline = last
	}
	_ = f.SetReadDeadline(deadline)
}

// stop ends the reader once the pipe has been quiet for stopIdle (at
// stopWait at the latest).
func (r *fifoReader) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	r.stopped, r.stoppedAt = true, time.Now()
	close(r.stopCh)
	if r.f != nil {
		r.quietFor(r.f)
	}
}

// readLines calls fn with each line r yields, without its newline, until
// r ends (its error, nil at its end); a line longer than max comes in
// pieces. fn must not keep the slice.
func readLines(r io.Reader, max int, fn func([]byte)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var long []byte
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			line := chunk[:len(chunk)-1]
			if long != nil {
				line = append(long, line...)
				long = nil
			}
			fn(line)
		case errors.Is(err, bufio.ErrBufferFull):
			long = append(long, chunk...)
			if len(long) >= max {
				fn(long)
				long = nil
			}
		default:
			if len(long)+len(chunk) > 0 {
				fn(append(long, chunk...))
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// outputQueue hands JSON lines to a writer that may be slow (the agent's
// stdout, read by the container runtime) without making the one who
// pushes them wait: past limit bytes waiting, a line is dropped and
// counted, and the count written once the writer caught up. At most
// twice limit is held: what waits, and what is being written.
type outputQueue struct {
	limit   int
	mu      sync.Mutex
	lines   [][]byte
	size    int
	dropped int
	closed  bool
	wake    chan struct{}
	flushed chan struct{}
}

func newOutputQueue(limit int) *outputQueue {
	return &outputQueue{limit: limit, wake: make(chan struct{}, 1), flushed: make(chan struct{})}
}

// push queues line (which it keeps), or drops it when the queue is full;
// it says whether it queued it.
func (q *outputQueue) push(line []byte) bool {
	q.mu.Lock()
	queued := !q.closed && q.size+len(line) <= q.limit
	if queued {
		q.lines = append(q.lines, line)
		q.size += len(line)
	} else {
		q.dropped++
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return queued
}

// close ends run once what is queued is written.
func (q *outputQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// run writes the queued lines to w, and dropped(n) after n were dropped,
// until close; a failed write loses that line only.
func (q *outputQueue) run(w io.Writer, dropped func(n int) []byte) {
	defer close(q.flushed)
	for {
		q.mu.Lock()
		lines, n, closed := q.lines, q.dropped, q.closed
		q.lines, q.size, q.dropped = nil, 0, 0
		q.mu.Unlock()
		for _, l := range lines {
			_, _ = w.Write(l)
		}
		if n > 0 {
			_, _ = w.Write(dropped(n))
		}
		if closed {
			return
		}
		<-q.wake
	}
}

// serverMajorRE finds the major version in postgres --version's answer
// ("postgres (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)").
var serverMajorRE = regexp.MustCompile(`\(PostgreSQL\) (\d+)`)

// parseServerMajor reads the major version of postgres --version's out.
func parseServerMajor(out string) (int, error) {
	m := serverMajorRE.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no version in postgres --version's %q", out)
	}
	return strconv.Atoi(m[1])
}

// serverMajor is the major version of the image's server (postgres
// --version, read once: the image does not change under a running agent).
func (a *Agent) serverMajor() (int, error) {
	if m := a.major.Load(); m > 0 {
		return int(m), nil
	}
	ctx, cancel := context.WithTimeout(a.ctx, queryTimeout)
	defer cancel()
	out, err := a.run(ctx, "postgres", []string{"--version"}, nil)
	if err != nil {
		return 0, fmt.Errorf("reading the server's version: %w", err)
	}
	m, err := parseServerMajor(out)
	if err != nil {
		return 0, err
	}
	a.major.Store(int32(m))
	return m, nil
}

// newServerCollector is the collector of the server's next start with
// PostgreSQL 15 or later; nil (the server logs text to stderr, as before
// 15) when the server is older or the pipes cannot be made, which is
// logged: logging never keeps the server from starting.
func (a *Agent) newServerCollector() *collector {
	major, err := a.serverMajor()
	if err != nil {
		a.log.Error(err, "Cannot tell the server's version: it logs text to stderr")
		return nil
	}
	if major < jsonLogMajor {
		return nil
	}
	c, err := newCollector(filepath.Join(os.TempDir(), logDirName))
	if err != nil {
		a.log.Error(err, "Cannot make the server's log pipes: it logs text to stderr")
		return nil
	}
	return c
}

// logEnvelope is what the server's JSON lines say of who wrote them.
func (a *Agent) logEnvelope() envelope {
	return envelope{namespace: a.cfg.Namespace, database: a.cfg.Database(), pod: a.cfg.Pod}
}
