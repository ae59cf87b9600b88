package dbtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
	"github.com/dbkeeper/dbkeeper/test/framework/postgres"
)

// TestMissingWhileWriting: Missing, read while the writer still writes,
// reports no id of a server that lost nothing. It once listed the ids
// acknowledged between its SELECT and its look at the acknowledgements
// (the failover suite's "acknowledged id missing" of issue 19: the ids
// were on every instance).
func TestMissingWhileWriting(t *testing.T) {
	target := localServer(t)
	ctx := context.Background()
	w, err := StartWriterWithTimeout(ctx, target, "acks", 3*time.Second)
	require.NoError(t, err)
	defer w.Stop()
	require.Eventually(t, func() bool { return w.AckCount() > 20 }, time.Minute, 10*time.Millisecond, "the writer writes")
	var wrong []string
	for i := range 300 {
		missing, err := w.Missing(ctx, target)
		require.NoError(t, err)
		if len(missing) > 0 {
			wrong = append(wrong, fmt.Sprintf("read %d: %v", i, missing))
		}
	}
	assert.Empty(t, wrong, "ids reported missing from a server that lost none")
	w.Stop()
	missing, err := w.Missing(ctx, target)
	require.NoError(t, err)
	assert.Empty(t, missing)
	assert.Greater(t, w.AckCount(), 100, "writes acknowledged meanwhile")
}

// TestStopIsNoFailure: the statement a writer's Stop interrupts is
// neither acknowledged nor failed; a test that asserts no write failed
// (an operator upgrade) once failed on the "context canceled" of its own
// Stop.
func TestStopIsNoFailure(t *testing.T) {
	target := localServer(t)
	ctx := context.Background()
	for i := range 50 {
		w, err := StartPacedWriter(ctx, target, fmt.Sprintf("acks_%d", i), 0, 0) // no pause: Stop almost always interrupts a statement
		require.NoError(t, err)
		require.Eventually(t, func() bool { return w.AckCount() > i%5 }, time.Minute, time.Millisecond)
		w.Stop()
		require.Zero(t, w.Failed(), "stop %d: %s", i, w.Describe())
		missing, err := w.Missing(ctx, target)
		require.NoError(t, err)
		require.Empty(t, missing)
	}
}

// localServer starts PostgreSQL on loopback for the test and is its
// superuser's target; skipped under -short.
func localServer(t *testing.T) sqlconn.Target {
	t.Helper()
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped under -short")
	}
	srv := postgres.Start(t)
	return sqlconn.Target{Host: "127.0.0.1", Port: int32(srv.Port), User: postgres.Superuser, Password: srv.Password, Database: "postgres"}
}
