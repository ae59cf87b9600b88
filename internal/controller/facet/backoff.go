package facet

import (
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The delays of a Backoff: the first retry after a second, doubling to a
// minute (a pod that turns Ready brings the Database back sooner).
const (
	BackoffFirst = time.Second
	BackoffMax   = time.Minute
)

// Backoff is the growing delay before a controller looks again at a
// Database whose server it could not reach: BackoffFirst, then doubling
// up to BackoffMax, until Reset. The zero Backoff is ready to use, and
// safe for concurrent reconciles.
type Backoff struct {
	delays sync.Map // client.ObjectKey → time.Duration
}

// Next is the delay before the next attempt for key, one step longer than
// the last.
func (b *Backoff) Next(key client.ObjectKey) time.Duration {
	delay := BackoffFirst
	if v, ok := b.delays.Load(key); ok {
		delay = min(2*v.(time.Duration), BackoffMax)
	}
	b.delays.Store(key, delay)
	return delay
}

// Reset forgets key's delay: the server was reached.
func (b *Backoff) Reset(key client.ObjectKey) { b.delays.Delete(key) }
