package agent

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestSharedCheckBoundsTheConnections (issue 29): a flood of readiness
// probes (open to any pod that reaches the agent's port) opened one
// superuser connection each; now 2,000 concurrent probes share one check,
// and a check is at most readyFresh old.
func TestSharedCheckBoundsTheConnections(t *testing.T) {
	var calls atomic.Int32
	c := &sharedCheck{fresh: time.Hour, check: func(context.Context) error {
		calls.Add(1)
		time.Sleep(20 * time.Millisecond) // a connection's cost
		return nil
	}}
	var wg sync.WaitGroup
	for range 2000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			assert.NoError(t, c.Do(context.Background()))
		}()
	}
	wg.Wait()
	assert.EqualValues(t, 1, calls.Load(), "checks run for 2,000 probes")

	// an answer older than fresh is checked again, and a failure is
	// everyone's answer until then
	failing := errors.New("the server does not accept connections")
	c = &sharedCheck{fresh: 50 * time.Millisecond, check: func(context.Context) error { calls.Add(1); return failing }}
	calls.Store(0)
	assert.ErrorIs(t, c.Do(context.Background()), failing)
	assert.ErrorIs(t, c.Do(context.Background()), failing)
	assert.EqualValues(t, 1, calls.Load())
	time.Sleep(60 * time.Millisecond)
	assert.ErrorIs(t, c.Do(context.Background()), failing)
	assert.EqualValues(t, 2, calls.Load(), "checked again once stale")

	// a caller that went away does not cancel the others' check
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c = &sharedCheck{fresh: time.Hour, check: func(ctx context.Context) error { return ctx.Err() }}
	assert.NoError(t, c.Do(ctx), "the check ran under the caller's cancellation")
}
