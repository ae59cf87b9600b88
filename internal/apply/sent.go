package apply

import (
	"bytes"
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Sent remembers, per object, the last status a controller applied and the
// resourceVersion it applied it on top of. A reconcile that runs before the
// cache has delivered that write reads the old object again, and Holds would
// see a difference that the API server no longer has; Sent recognises that
// case and does not send the same apply twice.
//
// Nothing is skipped once the cache shows any other version of the object:
// then Holds decides alone, so a change made after the write is still
// corrected. The zero value is ready to use and safe for concurrent use.
type Sent struct {
	mu        sync.Mutex
	last      map[string]sentApply
	lastSweep time.Time
}

type sentApply struct {
	body    []byte
	onTopOf string
	at      time.Time
}

// forgetAfter is how long an entry is kept when its object is never seen
// again (deleted); the cache catches up in milliseconds.
const forgetAfter = time.Minute

// ApplyStatus is the package's ApplyStatus, skipping an apply that this Sent
// already made on top of the version live still has. A nil Sent remembers
// nothing. It logs at V(1) before it writes, with the key/value pairs of
// the logger in ctx.
func (s *Sent) ApplyStatus(ctx context.Context, c client.Client, live client.Object, desired runtime.ApplyConfiguration, owner string) (bool, error) {
	return write(live, desired, owner, s, func() error {
		log.FromContext(ctx).V(1).Info("Applying status")
		return c.Status().Apply(ctx, desired, client.FieldOwner(owner), client.ForceOwnership)
	})
}

// already reports whether body was applied on top of the version live is
// still at.
func (s *Sent) already(key string, body []byte, version string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	last, ok := s.last[key]
	if !ok {
		return false
	}
	if last.onTopOf != version {
		delete(s.last, key) // the cache has moved on: Holds is the truth again
		return false
	}
	return bytes.Equal(last.body, body)
}

func (s *Sent) remember(key string, a sentApply) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last = map[string]sentApply{}
	}
	s.last[key] = a
	if a.at.Sub(s.lastSweep) < forgetAfter {
		return
	}
	for k, v := range s.last {
		if a.at.Sub(v.at) > forgetAfter {
			delete(s.last, k)
		}
	}
	s.lastSweep = a.at
}

func (s *Sent) forget(key string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.last, key)
}
