package agent

import (
	"context"
	"sync"
	"time"
)

// readyFresh is how long the answer of one readiness check serves the
// probes that follow: /readyz is open to whoever reaches the agent's port
// (the kubelet probes it without a token), and each check opens a
// superuser connection to the server; a flood of probes costs the server
// one connection per readyFresh, not one per request (issue 29).
const readyFresh = 500 * time.Millisecond

// sharedCheck runs check at most once per fresh: concurrent callers wait
// for the one check in flight, and callers within fresh of its end get
// its answer.
type sharedCheck struct {
	fresh time.Duration
	check func(context.Context) error

	mu  sync.Mutex
	at  time.Time
	err error
}

// Do is check's answer, at most fresh old. The check runs without the
// caller's cancellation (a client that went away does not make the
// answer of the others a cancellation), within its own timeout.
func (c *sharedCheck) Do(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < c.fresh {
		return c.err
	}
	c.err = c.check(context.WithoutCancel(ctx))
	c.at = time.Now()
	return c.err
}
