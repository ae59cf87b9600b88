package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// a record as PostgreSQL 15's jsonlog writes it (one line; fields without a
// value left out).
const errorRecord = `{"timestamp":"2026-12-07 10:00:00.123 UTC","user":"postgres","dbname":"app","pid":1234,"remote_host":"[local]","session_id":"6571a0b0.4d2","line_num":1,"ps":"SELECT","session_start":"2026-12-07 10:00:00 UTC","vxid":"3/2","txid":0,"error_severity":"ERROR","state_code":"42P01","message":"relation \"nope\" does not exist","statement":"SELECT * FROM nope WHERE a < b && c > d","cursor_position":15,"application_name":"psql","backend_type":"client backend","query_id":0}`

var testEnvelope = envelope{namespace: "shop", database: "orders", pod: "orders-1"}

// decodeLine reads one JSON line of the server's output.
func decodeLine(t *testing.T, b []byte) map[string]any {
	t.Helper()
	require.True(t, bytes.HasSuffix(b, []byte("\n")), "one line: %s", b)
	require.Equal(t, 1, bytes.Count(b, []byte("\n")), "one line: %s", b)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m), "%s", b)
	return m
}

// TestRecordEnvelope: a jsonlog record reaches the container's log as one
// JSON line in the agent's shape, naming the instance, the record itself
// unchanged under record, its level from its severity.
func TestRecordEnvelope(t *testing.T) {
	now := time.Date(2026, 12, 7, 10, 0, 0, 123e6, time.UTC)
	out, tail := testEnvelope.record(now, []byte(errorRecord))
	m := decodeLine(t, out)
	assert.Equal(t, "error", m["level"])
	assert.Equal(t, "2026-12-07T10:00:00.123Z", m["ts"])
	assert.Equal(t, "postgres", m["logger"])
	assert.Equal(t, "record", m["msg"])
	assert.Equal(t, "shop", m["namespace"])
	assert.Equal(t, "orders", m["database"])
	assert.Equal(t, "orders-1", m["pod"])
	var want map[string]any
	require.NoError(t, json.Unmarshal([]byte(errorRecord), &want))
	assert.Equal(t, want, m["record"], "PostgreSQL's record as it is")
	assert.Contains(t, string(out), `a < b && c > d`, "no HTML escapes")
	assert.True(t, strings.HasPrefix(string(out), `{"level":"error","ts":"2026-12-07T10:00:00.123Z","logger":"postgres","msg":"record","namespace":"shop","database":"orders","pod":"orders-1","record":{"timestamp":`), "%s", out)

	assert.Equal(t, "2026-12-07 10:00:00.123 UTC [1234] ERROR:  relation \"nope\" does not exist\n", tail)

	for sev, level := range map[string]string{"DEBUG2": "debug", "LOG": "info", "INFO": "info", "NOTICE": "info",
		"WARNING": "warn", "ERROR": "error", "FATAL": "error", "PANIC": "error"} {
		out, _ := testEnvelope.record(now, []byte(`{"pid":1,"error_severity":"`+sev+`","message":"m"}`))
		assert.Equal(t, level, decodeLine(t, out)["level"], sev)
	}
}

// TestRecordTailLines: the text lines a record leaves in the output's tail
// are stderr's, so that exitLine, startFailure and walGoneRE read them as
// they read a server that logs text.
func TestRecordTailLines(t *testing.T) {
	now := time.Now()
	_, fatal := testEnvelope.record(now, []byte(`{"timestamp":"2026-12-07 10:00:01.000 UTC","pid":10,"error_severity":"FATAL","message":"recovery ended before configured recovery target was reached","backend_type":"startup"}`))
	_, refused := testEnvelope.record(now, []byte(`{"timestamp":"2026-12-07 10:00:01.002 UTC","pid":12,"error_severity":"FATAL","state_code":"57P03","message":"the database system is shutting down"}`))
	_, shutdown := testEnvelope.record(now, []byte(`{"timestamp":"2026-12-07 10:00:01.003 UTC","pid":9,"error_severity":"LOG","message":"database system is shut down"}`))
	assert.Equal(t, "FATAL: recovery ended before configured recovery target was reached", exitLine(fatal+refused+shutdown))
	assert.Equal(t, "FATAL:  recovery ended before configured recovery target was reached", startFailure(fatal+shutdown))

	_, walGone := testEnvelope.record(now, []byte(`{"timestamp":"2026-12-07 10:00:02.000 UTC","pid":20,"error_severity":"FATAL","state_code":"XX000","message":"could not receive data from WAL stream: ERROR:  requested WAL segment 000000010000000000000003 has already been removed","backend_type":"walreceiver"}`))
	m := walGoneRE.FindStringSubmatch(walGone)
	require.NotNil(t, m, walGone)
	assert.Equal(t, "000000010000000000000003", m[1])

	_, detailed := testEnvelope.record(now, []byte(`{"timestamp":"t","pid":3,"error_severity":"FATAL","message":"could not map anonymous shared memory: Cannot allocate memory","detail":"Failed system call was mmap.","hint":"This error usually means...\nsecond line"}`))
	assert.Equal(t, "t [3] FATAL:  could not map anonymous shared memory: Cannot allocate memory\n"+
		"t [3] DETAIL:  Failed system call was mmap.\n"+
		"t [3] HINT:  This error usually means...\n\tsecond line\n", detailed)
}

// TestTextEnvelope: a line of text (stderr before the collector starts,
// the collector's stderr file) is one JSON line too, its level from the
// severity it holds; a line that is no record goes as text.
func TestTextEnvelope(t *testing.T) {
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	m := decodeLine(t, testEnvelope.text(now, msgStderr, []byte(`2026-12-07 10:00:00.000 UTC [7] FATAL:  could not access file "no_such_library": No such file or directory`)))
	assert.Equal(t, "error", m["level"])
	assert.Equal(t, "stderr", m["msg"])
	assert.Equal(t, `2026-12-07 10:00:00.000 UTC [7] FATAL:  could not access file "no_such_library": No such file or directory`, m["line"])
	assert.Equal(t, "orders-1", m["pod"])
	assert.Nil(t, m["record"])

	m = decodeLine(t, testEnvelope.text(now, msgStdout, []byte("PostgreSQL init process complete; ready for start up.")))
	assert.Equal(t, "info", m["level"])
	assert.Equal(t, "stdout", m["msg"])

	out, tail := testEnvelope.record(now, []byte(`P00  ERROR: [082]: WAL segment was not archived {"x":`))
	m = decodeLine(t, out)
	assert.Equal(t, "stderr", m["msg"], "not a record")
	assert.Equal(t, `P00  ERROR: [082]: WAL segment was not archived {"x":`, m["line"])
	assert.Equal(t, "P00  ERROR: [082]: WAL segment was not archived {\"x\":\n", tail)

	m = decodeLine(t, testEnvelope.dropped(now, 42))
	assert.Equal(t, "dropped", m["msg"])
	assert.EqualValues(t, 42, m["dropped"])
}

// TestReadLines: lines without their newline, the last one without one
// too; a line longer than the bound in pieces.
func TestReadLines(t *testing.T) {
	var got []string
	long := strings.Repeat("x", 200<<10)
	require.NoError(t, readLines(strings.NewReader("a\n\nb\n"+long+"\nlast"), 100<<10, func(l []byte) { got = append(got, string(l)) }))
	require.Len(t, got, 6)
	assert.Equal(t, []string{"a", "", "b"}, got[:3])
	assert.Equal(t, long, got[3]+got[4], "the long line in pieces")
	assert.GreaterOrEqual(t, len(got[3]), 100<<10)
	assert.Equal(t, "last", got[5])
}

// TestParseServerMajor reads postgres --version.
func TestParseServerMajor(t *testing.T) {
	m, err := parseServerMajor("postgres (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)\n")
	require.NoError(t, err)
	assert.Equal(t, 15, m)
	m, err = parseServerMajor("postgres (PostgreSQL) 17.6")
	require.NoError(t, err)
	assert.Equal(t, 17, m)
	_, err = parseServerMajor("bash: postgres: command not found")
	assert.Error(t, err)
}

// TestConfigDatabase: the Database is the pod's StatefulSet.
func TestConfigDatabase(t *testing.T) {
	assert.Equal(t, "orders", Config{Pod: "orders-0"}.Database())
	assert.Equal(t, "my-db-2", Config{Pod: "my-db-2-12"}.Database())
	assert.Equal(t, "", Config{}.Database())
	assert.Equal(t, []any{"namespace", "shop", "database", "orders", "pod", "orders-1"}, Config{Namespace: "shop", Pod: "orders-1"}.LogValues())
}

// TestCollectorArgs: jsonlog into the pipes, never rotated.
func TestCollectorArgs(t *testing.T) {
	assert.Equal(t, "-c logging_collector=on -c log_destination=jsonlog -c log_directory=/tmp/dbkeeper-pglog -c log_filename=postgres.log "+
		"-c log_rotation_age=0 -c log_rotation_size=0 -c log_truncate_on_rotation=off", strings.Join(collectorArgs("/tmp/dbkeeper-pglog"), " "))
}

// syncBuffer is a bytes.Buffer for writers in several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// writeFIFO opens path as a writer process would (blocking until the
// reader opened it) and writes text.
func writeFIFO(t *testing.T, path, text string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", `printf '%s' "$1" > "$2"`, "sh", text, path)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// TestFIFOReader: the reader reads every line of every writer (the
// collector restarted), and ends at stop once the pipe is quiet: also
// when no writer ever came.
func TestFIFOReader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.json")
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	r := newFIFOReader(path)
	var mu sync.Mutex
	var got []string
	errc := make(chan error, 1)
	go func() {
		var failure error
		r.run(func(l []byte) {
			mu.Lock()
			got = append(got, string(l))
			mu.Unlock()
		}, func(err error) { failure = err })
		errc <- failure
	}()
	writeFIFO(t, path, "one\ntwo\n")
	writeFIFO(t, path, "three\nfour, no newline")
	// the last line, without its newline, comes at stop: the reader holds
	// a write end of its own, so the pipe does not end with its writer
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 3
	}, 10*time.Second, 10*time.Millisecond)
	start := time.Now()
	r.stop()
	select {
	case err := <-errc:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the reader did not end at stop")
	}
	assert.Less(t, time.Since(start), stopIdle+time.Second)
	assert.Equal(t, []string{"one", "two", "three", "four, no newline"}, got)

	// a reader stopped before any writer came
	r = newFIFOReader(path)
	go func() {
		var failure error
		r.run(func([]byte) {}, func(err error) { failure = err })
		errc <- failure
	}()
	require.Eventually(t, func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.f != nil }, 5*time.Second, time.Millisecond)
	r.stop()
	select {
	case err := <-errc:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the reader waiting for a writer did not end at stop")
	}
}

// TestFIFOReaderKeepsEveryWriter: writers that open, write and close the
// pipe one after the other as fast as they can (a collector restarted
// again and again) lose no line: with a read end only, the reader dropped
// the lines of a writer that came between its end of file and its close
// (CI's TestCollectorOutput lost two records of three).
func TestFIFOReaderKeepsEveryWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.json")
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	r := newFIFOReader(path)
	var mu sync.Mutex
	got := 0
	go r.run(func([]byte) { mu.Lock(); got++; mu.Unlock() }, func(error) {})
	const writers = 500
	for i := range writers {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = fmt.Fprintf(f, "line %d\n", i)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	r.stop()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the reader did not end at stop")
	}
	assert.Equal(t, writers, got, "lines read of %d writers", writers)
}

// TestFIFOReaderEndsAfterItsWriter: stopped while a writer holds the
// pipe, the reader reads what the writer writes until it closes it.
func TestFIFOReaderEndsAfterItsWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.json")
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	r := newFIFOReader(path)
	var got syncBuffer
	done := make(chan error, 1)
	go func() {
		var failure error
		r.run(func(l []byte) { _, _ = got.Write(append(l, '\n')) }, func(err error) { failure = err })
		done <- failure
	}()
	w := exec.Command("sh", "-c", `exec > "$1"; echo first; sleep 0.5; echo last`, "sh", path)
	require.NoError(t, w.Start())
	require.Eventually(t, func() bool { return got.String() == "first\n" }, 5*time.Second, time.Millisecond)
	r.stop()
	require.NoError(t, w.Wait())
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the reader did not end after its writer")
	}
	assert.Equal(t, "first\nlast\n", got.String())
}

// blockedWriter is a container log nobody reads: every write waits until
// release.
type blockedWriter struct {
	release chan struct{}
	out     syncBuffer
}

func (w *blockedWriter) Write(p []byte) (int, error) {
	<-w.release
	return w.out.Write(p)
}

// TestOutputQueueDropsRatherThanWait: with the agent's stdout stuck, the
// reader never waits: past the bound lines are dropped, and the count is
// written once stdout moves again.
func TestOutputQueueDropsRatherThanWait(t *testing.T) {
	q := newOutputQueue(100)
	w := &blockedWriter{release: make(chan struct{})}
	go q.run(w, func(n int) []byte { return testEnvelope.dropped(time.Now(), n) })
	line := []byte(strings.Repeat("x", 9) + "\n")
	pushed := make(chan int)
	go func() {
		queued := 0
		for range 1000 {
			if q.push(append([]byte(nil), line...)) {
				queued++
			}
		}
		pushed <- queued
	}()
	var queued int
	select {
	case queued = <-pushed:
	case <-time.After(5 * time.Second):
		t.Fatal("a push waited for the stuck writer")
	}
	assert.LessOrEqual(t, queued, 2*100/len(line)+1, "at most twice the bound held")
	close(w.release)
	q.close()
	select {
	case <-q.flushed:
	case <-time.After(5 * time.Second):
		t.Fatal("the queue did not flush")
	}
	out := w.out.String()
	assert.Equal(t, queued, strings.Count(out, string(line)))
	require.Contains(t, out, `"msg":"dropped"`)
	var dropped float64
	for _, l := range strings.SplitAfter(out, "\n") {
		if strings.Contains(l, `"msg":"dropped"`) {
			dropped += decodeLine(t, []byte(l))["dropped"].(float64)
		}
	}
	assert.EqualValues(t, 1000-queued, dropped, "every dropped line counted")
}

// TestCollectorOutput: a server (a shell standing in) that writes stderr
// before its collector starts, then jsonlog records into the pipe (two
// collector runs) and a raw line into the stderr file: every line reaches
// stdout as JSON naming the instance, and the tail holds the records as
// text, where exitLine finds the FATAL.
func TestCollectorOutput(t *testing.T) {
	dir := filepath.Join(t.TempDir(), logDirName)
	// a pipe left by an earlier start is made again
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, jsonLogFileName), []byte("stale"), 0o600))
	col, err := newCollector(dir)
	require.NoError(t, err)
	for _, name := range []string{logFileName, jsonLogFileName} {
		fi, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Equal(t, os.ModeNamedPipe, fi.Mode().Type(), name)
	}
	script := `echo 'LOG:  redirecting log output to logging collector process' >&2
printf '%s\n' "$1" > "$3/postgres.json"
echo 'sh: archive_command said this' > "$3/postgres.log"
printf '%s\n%s\n' "$2" '{"pid":9,"error_severity":"LOG","message":"database system is shut down"}' > "$3/postgres.json"
echo 'PostgreSQL init process complete'`
	fatal := `{"timestamp":"2026-12-07 10:00:01.000 UTC","pid":10,"error_severity":"FATAL","message":"recovery ended before configured recovery target was reached"}`
	cmd := exec.Command("sh", "-c", script, "sh", errorRecord, fatal, dir)
	var stdout, stderr syncBuffer
	env := testEnvelope
	out, err := teeServerOutput(cmd, &stdout, &stderr, &env, col)
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	out.closeWriters()
	require.NoError(t, cmd.Wait())
	out.serverExited()
	lines := out.lines(10 * time.Second)
	out.flushed(10 * time.Second)

	assert.Equal(t, "FATAL: recovery ended before configured recovery target was reached", exitLine(lines))
	assert.Contains(t, lines, "LOG:  redirecting log output to logging collector process\n")
	assert.Contains(t, lines, "sh: archive_command said this\n")
	assert.Contains(t, lines, "[1234] ERROR:  relation \"nope\" does not exist\n")

	var records, texts []map[string]any
	for _, l := range strings.SplitAfter(stdout.String(), "\n") {
		if l == "" {
			continue
		}
		m := decodeLine(t, []byte(l))
		assert.Equal(t, "orders-1", m["pod"])
		assert.Equal(t, "orders", m["database"])
		assert.Equal(t, "shop", m["namespace"])
		assert.Equal(t, "postgres", m["logger"])
		if m["msg"] == "record" {
			records = append(records, m["record"].(map[string]any))
		} else {
			texts = append(texts, m)
		}
	}
	require.Len(t, records, 3, "%s", stdout.String())
	assert.Equal(t, "ERROR", records[0]["error_severity"])
	assert.Equal(t, "FATAL", records[1]["error_severity"])
	assert.Equal(t, "database system is shut down", records[2]["message"])
	require.Len(t, texts, 2, "%s", stdout.String())
	byLine := map[string]any{}
	for _, m := range texts {
		byLine[m["line"].(string)] = m["msg"]
	}
	assert.Equal(t, map[string]any{"sh: archive_command said this": "stderr", "PostgreSQL init process complete": "stdout"}, byLine)

	m := decodeLine(t, []byte(stderr.String()))
	assert.Equal(t, "stderr", m["msg"])
	assert.Equal(t, "LOG:  redirecting log output to logging collector process", m["line"])
}

// TestCollectorOfAServerThatNeverLogged: a server that exits before its
// collector starts (a setting refused) leaves no reader behind.
func TestCollectorOfAServerThatNeverLogged(t *testing.T) {
	col, err := newCollector(filepath.Join(t.TempDir(), logDirName))
	require.NoError(t, err)
	cmd := exec.Command("sh", "-c", `echo 'FATAL:  invalid value for parameter "shared_buffers": "1XB"' >&2; exit 1`)
	var stdout, stderr syncBuffer
	env := testEnvelope
	out, err := teeServerOutput(cmd, &stdout, &stderr, &env, col)
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	out.closeWriters()
	require.Error(t, cmd.Wait())
	start := time.Now()
	out.serverExited()
	lines := out.lines(10 * time.Second)
	assert.Less(t, time.Since(start), 2*time.Second, "the readers ended at once")
	select {
	case <-out.done:
	default:
		t.Fatal("the readers did not end")
	}
	assert.Equal(t, `FATAL: invalid value for parameter "shared_buffers": "1XB"`, exitLine(lines))
	out.flushed(5 * time.Second)
	assert.Empty(t, stdout.String())
	assert.Equal(t, "error", decodeLine(t, []byte(stderr.String()))["level"])
}

// TestFIFOReaderTriesAgain: a reader that cannot open its pipe says so
// and tries again (a pipe nobody reads would stop the server's logging).
func TestFIFOReaderTriesAgain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.json")
	r := newFIFOReader(path)
	failures := make(chan error, 10)
	var got syncBuffer
	go r.run(func(l []byte) { _, _ = got.Write(append(l, '\n')) }, func(err error) { failures <- err })
	select {
	case err := <-failures:
		assert.ErrorContains(t, err, "no such file or directory")
	case <-time.After(5 * time.Second):
		t.Fatal("no failure reported")
	}
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	writeFIFO(t, path, "after\n")
	require.Eventually(t, func() bool { return got.String() == "after\n" }, 5*time.Second, 10*time.Millisecond)
	r.stop()
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the reader did not end at stop")
	}
}
