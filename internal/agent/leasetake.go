package agent

import (
	"context"
	"fmt"
	"time"

	"k8s.io/utils/ptr"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// tryTake reads the lease and takes it when this agent may (mayTake); it
// then holds it and renews it. It answers the verdict it acted on.
func (k *leaseKeeper) tryTake(ctx context.Context) (takeVerdict, error) {
	return k.take(ctx, nil)
}

// retake is tryTake for a primary that fenced itself: it takes only a
// lease that it may serve again with (mayServeAgain), never another's.
func (k *leaseKeeper) retake(ctx context.Context) (takeVerdict, error) {
	return k.take(ctx, func(r leaseRecord) (bool, string) { return mayServeAgain(k.self, r) })
}

// take is tryTake, when allow (nil: always) accepts the record read too.
// The verdict and the start of the write are one step under the lock, so
// that no failsafe confirmation (confirm) comes between them.
func (k *leaseKeeper) take(ctx context.Context, allow func(leaseRecord) (bool, string)) (takeVerdict, error) {
	l, err := k.read(ctx)
	if err != nil {
		return takeVerdict{}, err
	}
	k.mu.Lock()
	v := mayTake(k.self, k.obs, k.grant, k.now())
	if v.May && allow != nil {
		if ok, why := allow(k.obs.Record); !ok {
			v = takeVerdict{Reason: why}
		}
	}
	k.taking = v.May
	k.mu.Unlock()
	if !v.May {
		return v, nil
	}
	start := k.now()
	err = k.write(ctx, l, k.self)
	k.mu.Lock()
	k.taking = false
	if err == nil {
		if !k.holding {
			k.log.Info("Took the primary lease", "why", v.Reason)
		}
		k.holding, k.lastRenew = true, start
		k.outage, k.lastConfirmed, k.failsafeSince = false, time.Time{}, time.Time{}
	}
	k.mu.Unlock()
	if err != nil {
		return takeVerdict{}, err
	}
	return v, nil
}

// acquire takes the lease, waiting while its holder may still be alive,
// but no longer than LeaseDuration + 2 × LeaseRetryPeriod beyond the
// moment this agent began seeing the record as it is; progress is told
// what it waits for.
func (k *leaseKeeper) acquire(ctx context.Context, progress func(string)) error {
	var deadline time.Time
	for {
		v, err := k.tryTake(ctx)
		if err == nil && v.May {
			return nil
		}
		if deadline.IsZero() {
			k.mu.Lock()
			since := k.obs.Since
			k.mu.Unlock()
			if since.IsZero() { // never read: a missing lease, an unreachable API server
				since = k.now()
			}
			deadline = since.Add(agentapi.LeaseDuration + 2*agentapi.LeaseRetryPeriod)
		}
		msg := v.Reason
		if err != nil {
			msg = err.Error()
		}
		if !deadline.IsZero() && k.now().After(deadline) {
			return fmt.Errorf("taking the primary lease over: %s", msg)
		}
		progress("waiting for the primary lease: " + msg)
		select {
		case <-ctx.Done():
			return fmt.Errorf("taking the primary lease over: %w", ctx.Err())
		case <-time.After(agentapi.LeaseRetryPeriod):
		}
	}
}

// release writes an empty holder into a lease this agent holds (after
// its server stopped: a demote, a pod deletion), so that another instance
// takes it at once. A lease that names another holder is left alone.
func (k *leaseKeeper) release(ctx context.Context) error {
	k.mu.Lock()
	k.holding = false
	k.mu.Unlock()
	l, err := k.read(ctx)
	if err != nil {
		return fmt.Errorf("releasing the primary lease: %w", err)
	}
	if ptr.Deref(l.Spec.HolderIdentity, "") != k.self || k.record(l).PrevSelf {
		return nil
	}
	if err := k.write(ctx, l, ""); err != nil {
		return fmt.Errorf("releasing the primary lease: %w", err)
	}
	k.log.Info("Released the primary lease")
	return nil
}
