package agent

import (
	"bytes"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// TestRecoveryRetryDelay: the server of an unfinished recovery starts
// again 10 s after its first exit, twice as long after each next one, never
// more than 5 min later.
func TestRecoveryRetryDelay(t *testing.T) {
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 5 * time.Minute, 5 * time.Minute}
	for i, d := range want {
		assert.Equal(t, d, recoveryRetryDelay(i+1), "after exit %d", i+1)
	}
	assert.Equal(t, 5*time.Minute, recoveryRetryDelay(1000), "no overflow")
}

// TestExitLine: the line that says why a recovery's server exited is its
// startup process's FATAL, not the refusals of the agent's attempts to
// connect that come before and after it; a PANIC comes first.
func TestExitLine(t *testing.T) {
	out := `2026-01-02 10:00:00.000 UTC [10] LOG:  starting point-in-time recovery to 2026-01-02 11:00:00+00
2026-01-02 10:00:00.100 UTC [11] FATAL:  the database system is not accepting connections
2026-01-02 10:00:00.100 UTC [11] DETAIL:  Hot standby mode is disabled.
2026-01-02 10:00:01.000 UTC [10] LOG:  redo done at 0/3000100
2026-01-02 10:00:01.000 UTC [10] FATAL:  recovery ended before configured recovery target was reached
2026-01-02 10:00:01.001 UTC [9] LOG:  startup process (PID 10) exited with exit code 1
2026-01-02 10:00:01.002 UTC [12] FATAL:  the database system is shutting down
2026-01-02 10:00:01.003 UTC [9] LOG:  database system is shut down
`
	assert.Equal(t, "FATAL: recovery ended before configured recovery target was reached", exitLine(out))
	assert.Equal(t, "PANIC: could not locate a valid checkpoint record",
		exitLine(out+"2026-01-02 10:00:02.000 UTC [13] PANIC:  could not locate a valid checkpoint record\n"))
	assert.Empty(t, exitLine("LOG:  database system is shut down\n"))
}

// TestOutputTail: what a server writes goes on unchanged to the agent's
// stdout and stderr; the tail keeps its end only, complete once the
// writers closed the pipes.
func TestOutputTail(t *testing.T) {
	cmd := exec.Command("sh", "-c", `i=0; while [ $i -lt 10000 ]; do echo "LOG:  line $i"; i=$((i+1)); done; echo "FATAL:  the end" >&2`)
	var stdout, stderr bytes.Buffer
	out, err := teeOutput(cmd, &stdout, &stderr)
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	out.closeWriters()
	require.NoError(t, cmd.Wait())
	lines := out.lines(10 * time.Second)
	assert.Equal(t, "FATAL: the end", exitLine(lines))
	assert.True(t, strings.Contains(lines, "LOG:  line 9999\n"), "the tail has the last line")
	assert.False(t, strings.Contains(lines, "LOG:  line 0\n"), "the tail keeps the end only")
	assert.LessOrEqual(t, len(lines), 2*outputTailSize)
	assert.Equal(t, 10000, strings.Count(stdout.String(), "\n"), "every line of stdout on the agent's")
	assert.True(t, strings.HasPrefix(stdout.String(), "LOG:  line 0\nLOG:  line 1\n"))
	assert.Equal(t, "FATAL:  the end\n", stderr.String())
}

// TestOutputTailKeepsStderr: the server's log lines (stderr) stay in the
// tail whatever comes on stdout after them (CI saw a FATAL on stderr
// pushed out of a shared tail by stdout still in its pipe).
func TestOutputTailKeepsStderr(t *testing.T) {
	cmd := exec.Command("sh", "-c", `echo "FATAL:  the end" >&2; i=0; while [ $i -lt 10000 ]; do echo "LOG:  line $i"; i=$((i+1)); done`)
	out, err := teeOutput(cmd, io.Discard, io.Discard)
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	out.closeWriters()
	require.NoError(t, cmd.Wait())
	lines := out.lines(10 * time.Second)
	assert.Equal(t, "FATAL: the end", exitLine(lines))
	assert.True(t, strings.HasSuffix(lines, "LOG:  line 9999\nFATAL:  the end\n"), "stdout's tail, then stderr's")
}

// TestFailedBootstrapBacksOff: a bootstrap that failed (a restore with no
// backup before its target) is not taken again at the operator's next
// poll, every 2 s: the next is refused (409, saying why and when) for
// recoveryRetryDelay of the failures in a row (in make demo's first run, a
// restore was run again every 2 s against the object store).
func TestFailedBootstrapBacksOff(t *testing.T) {
	a := &Agent{cfg: Config{PGData: t.TempDir()}}
	a.bootstrapFailed("restore: pgbackrest restore: ERROR: [075]: unable to find backup set with stop time less than '2026-12-06 10:35:21+00'")
	assert.Contains(t, a.message, "failure 1 in a row; the next attempt in 10s")
	err := a.bootstrap(agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	var oe *opError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, 409, oe.code)
	assert.Contains(t, oe.msg, "unable to find backup set")
	assert.Contains(t, oe.msg, "trying again in 10s")

	wait, _ := a.bootstrapBackoff(time.Now().Add(recoveryRetryDelay(1)))
	assert.Zero(t, wait, "refused after its delay")
	a.bootstrapFailed("restore: again")
	wait, _ = a.bootstrapBackoff(time.Now())
	assert.InDelta(t, float64(recoveryRetryDelay(2)), float64(wait), float64(time.Second), "the delay doubles")
}
