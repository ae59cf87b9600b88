package agent

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// renew renews a held lease: a read first (another holder fences at
// once), then a conditional update. It fences instead when the last
// renew (or failsafe round, shouldFenceAt) is already too old. A renew
// that fails because the API server does not answer starts the failsafe
// rounds; one the API server refuses (a 409, a missing Lease) stops them.
func (k *leaseKeeper) renew(ctx context.Context) {
	start := k.now()
	k.mu.Lock()
	v := shouldFenceAt(k.lastRenew, k.lastConfirmed, start)
	k.mu.Unlock()
	if v.Fence {
		k.fence(v.Reason)
		return
	}
	l, err := k.read(ctx)
	if err != nil {
		k.renewFailed(err)
		return
	}
	rec := k.record(l)
	if v := shouldFence(k.self, start, &rec, start); v.Fence {
		k.fence(v.Reason)
		return
	}
	if err := k.write(ctx, l, k.self); err != nil {
		k.renewFailed(err)
		return
	}
	k.mu.Lock()
	if k.holding && start.After(k.lastRenew) {
		k.lastRenew = start
	}
	k.outage = false
	since := k.failsafeSince
	k.failsafeSince = time.Time{}
	k.mu.Unlock()
	if !since.IsZero() {
		k.log.Info("No longer serving without the API server: renewed the primary lease", "after", k.now().Sub(since).Round(time.Millisecond))
	}
}

// renewFailed notes why a renew failed: the API server did not answer
// (apiUnreachable), or it refused.
func (k *leaseKeeper) renewFailed(err error) {
	outage := apiUnreachable(err)
	k.mu.Lock()
	k.outage = outage
	k.mu.Unlock()
	k.log.Error(err, "Cannot renew the primary lease", "apiServerUnreachable", outage)
}

// apiUnreachable says err is the API server's silence or distress (no
// answer, a timeout, a 5xx or 429), not an answer about the lease (a
// 409, a missing Lease, a refused permission).
func apiUnreachable(err error) bool {
	if errors.Is(err, errLeaseTaken) {
		return false
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		code := st.Status().Code
		return code >= http.StatusInternalServerError || code == http.StatusTooManyRequests || code == 0
	}
	return true
}

// fence stops holding and calls onFence, once per holding.
func (k *leaseKeeper) fence(reason string) {
	k.mu.Lock()
	was := k.holding
	k.holding = false
	since := k.failsafeSince
	k.outage, k.lastConfirmed, k.failsafeSince = false, time.Time{}, time.Time{}
	k.mu.Unlock()
	if !was {
		return
	}
	if !since.IsZero() {
		k.log.Info("No longer serving without the API server: fencing", "after", k.now().Sub(since).Round(time.Millisecond))
	}
	k.log.Info("Fencing: the primary lease is lost", "reason", reason)
	if k.onFence != nil {
		k.onFence(reason)
	}
}

// run reads (or, while holding, renews) the lease every LeaseRetryPeriod
// until ctx ends, and runs the failsafe rounds (failsafe.go) beside.
func (k *leaseKeeper) run(ctx context.Context) {
	go k.failsafe(ctx)
	for {
		k.mu.Lock()
		holding := k.holding
		k.mu.Unlock()
		if holding {
			k.renew(ctx)
		} else if _, err := k.read(ctx); err != nil && ctx.Err() == nil {
			k.log.V(1).Info("Cannot read the primary lease", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(agentapi.LeaseRetryPeriod):
		}
	}
}

// watchdogTick is the longest the watchdog sleeps: it fences at most that
// long after the renew deadline, also right after the process was stopped
// and continued (the monotonic clock runs on while it is stopped).
const watchdogTick = 100 * time.Millisecond

// watchdog fences a holder whose last successful renew (or failsafe
// round, shouldFenceAt) began more than LeaseRenewDeadline ago,
// independently of the renew loop (which may be stuck in a request). It
// notes when the holder begins to serve on the failsafe alone.
func (k *leaseKeeper) watchdog(ctx context.Context) {
	for {
		k.mu.Lock()
		wait := watchdogTick
		var v fenceVerdict
		var entered bool
		var members []string
		var lastRenew time.Duration
		if k.holding {
			now := k.now()
			v = shouldFenceAt(k.lastRenew, k.lastConfirmed, now)
			if !v.Fence && k.failsafeSince.IsZero() && servingInFailsafe(k.lastRenew, k.lastConfirmed, now) {
				k.failsafeSince = k.lastRenew.Add(agentapi.LeaseRenewDeadline)
				entered, members, lastRenew = true, k.obs.Record.Members, now.Sub(k.lastRenew)
			}
			base := k.lastRenew
			if k.lastConfirmed.After(base) {
				base = k.lastConfirmed
			}
			if left := base.Add(agentapi.LeaseRenewDeadline).Sub(now); left > 0 && left < wait {
				wait = left + time.Millisecond
			}
		}
		k.mu.Unlock()
		if entered {
			k.log.Info("Serving without the API server: every member confirmed", "members", strings.Join(members, ","),
				"lastRenew", lastRenew.Round(time.Millisecond))
		}
		if v.Fence {
			k.fence(v.Reason)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}
