package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A takeover in one process: the first agent's copies pause with the
// collector's pipes held open; what the server writes meanwhile (to its
// stderr pipe and its collector's pipe, neither failing) reaches the
// second agent's copies, which read the same pipes.
func TestPausedOutputKeepsTheLinesForTheNextAgent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), logDirName)
	col, err := newCollector(dir)
	require.NoError(t, err)
	var readers, writers []*os.File
	for range 2 {
		r, w, err := os.Pipe()
		require.NoError(t, err)
		readers, writers = append(readers, r), append(writers, w)
	}
	t.Cleanup(func() {
		for _, w := range writers {
			w.Close()
		}
	})
	env := testEnvelope
	var first syncBuffer
	t1 := &outputTail{done: make(chan struct{}), collector: col}
	t1.copy(readers, &first, &first, &env)
	// the server's logging collector, writing its file as it would (the
	// open waits for the reader)
	logFile, err := os.OpenFile(filepath.Join(dir, logFileName), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	defer logFile.Close()
	_, err = logFile.WriteString("collector line one\n")
	require.NoError(t, err)
	_, err = writers[1].WriteString("stderr line one\n")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return strings.Contains(first.String(), "collector line one") && strings.Contains(first.String(), "stderr line one")
	}, 5*time.Second, 10*time.Millisecond)

	held, err := holdFIFOs(dir)
	require.NoError(t, err)
	t1.pause(time.Second)
	select {
	case <-t1.done:
	default:
		t.Fatal("the first agent's copies did not stop")
	}
	// between the agents: nobody reads, nothing fails
	_, err = logFile.WriteString("collector line two\n")
	require.NoError(t, err, "the collector's write while no agent reads")
	_, err = writers[1].WriteString("stderr line two\n")
	require.NoError(t, err)

	// a new process has files of its own, without the first's deadlines
	for _, r := range readers {
		require.NoError(t, r.SetReadDeadline(time.Time{}))
	}
	var second syncBuffer
	t2 := &outputTail{done: make(chan struct{}), collector: reopenCollector(dir)}
	t2.copy(readers, &second, &second, &env)
	require.Eventually(t, func() bool {
		return strings.Contains(second.String(), "collector line two") && strings.Contains(second.String(), "stderr line two")
	}, 5*time.Second, 10*time.Millisecond, "the second agent's output: %s", &second)
	closeFDs(held)
	_, err = logFile.WriteString("collector line three\n")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(second.String(), "collector line three") }, 5*time.Second, 10*time.Millisecond)
	assert.NotContains(t, first.String(), "line two")
	t2.paused.Store(true) // the readers are the test's to close
	t2.collector.stderrFile.pause()
	t2.collector.jsonFile.pause()
	for _, r := range readers {
		_ = r.Close()
	}
}
