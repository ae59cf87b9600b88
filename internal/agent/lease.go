package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// leaseRequestTimeout bounds one read or write of the lease, so that a
// hung API server cannot hold a renew past the renew deadline.
const leaseRequestTimeout = LeaseRetryPeriod

// errLeaseTaken is a conditional update that lost: the lease changed
// since it was read.
var errLeaseTaken = errors.New("the primary lease changed since it was read")

// leaseKeeper reads the primary lease every LeaseRetryPeriod and, while
// the agent holds it, renews it; a watchdog fences the agent (onFence)
// when a renew did not succeed in time or another holder shows up.
type leaseKeeper struct {
	client coordclient.LeaseInterface
	ns     string
	name   string
	self   string
	uid    string
	log    logr.Logger
	// now is the agent's clock (time.Now: monotonic).
	now func() time.Time
	// onFence stops the server; the keeper calls it once per holding,
	// outside its lock.
	onFence func(reason string)

	mu  sync.Mutex
	obs leaseObservation
	// lease is the last lease read, nil when it was missing.
	lease *coordinationv1.Lease
	err   string
	// holding says the agent holds the lease and renews it; lastRenew is
	// when its last successful renew (or take) began.
	holding   bool
	lastRenew time.Time
	// taking says a take's write is in flight: the agent confirms no
	// primary's failsafe meanwhile.
	taking bool

	// The failsafe (failsafe.go). outage says the holder's last renew
	// failed because the API server did not answer: the rounds run.
	// lastConfirmed is when the last round in which every other member
	// confirmed it began; failsafeSince when the watchdog saw it begin to
	// serve on the members' confirmations alone (zero before), for the
	// log.
	outage        bool
	lastConfirmed time.Time
	failsafeSince time.Time
	// ask asks a member (by pod name) to confirm req; nil: no failsafe.
	ask func(ctx context.Context, pod string, req FailsafeRequest) error
	// grant is the last failsafe this agent confirmed as a member.
	grant failsafeGrant
}

// newLeaseKeeper returns a keeper of the lease cfg names, nil when it
// names none (a pod made before issue 19).
func newLeaseKeeper(cfg Config, log logr.Logger) (*leaseKeeper, error) {
	if cfg.LeaseName == "" {
		return nil, nil
	}
	rc := cfg.RestConfig
	if rc == nil {
		var err error
		if rc, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("reading the in-cluster API configuration for the primary lease: %w", err)
		}
	}
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "dbkeeper-agent/" + cfg.Pod
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("making the API client for the primary lease: %w", err)
	}
	return &leaseKeeper{
		client: cs.CoordinationV1().Leases(cfg.Namespace), ns: cfg.Namespace, name: cfg.LeaseName,
		self: cfg.Pod, uid: cfg.PodUID, log: log.WithValues("lease", cfg.LeaseName), now: time.Now,
		ask: newPeerAsker(cfg).ask,
	}, nil
}

// record is what observe compares of a lease.
func (k *leaseKeeper) record(l *coordinationv1.Lease) leaseRecord {
	r := leaseRecord{Holder: ptr.Deref(l.Spec.HolderIdentity, ""), ResourceVersion: l.ResourceVersion,
		ReleasedBy: l.Annotations[AnnotationReleasedBy], HolderUID: l.Annotations[AnnotationHolderUID]}
	r.PrevSelf = r.Holder == k.self && r.HolderUID != "" && k.uid != "" && r.HolderUID != k.uid
	if v, ok := l.Annotations[AnnotationMembers]; ok {
		r.Members, r.HasMembers = parseMembers(v), true
	}
	if l.Spec.RenewTime != nil {
		r.RenewTime = l.Spec.RenewTime.Time
	}
	return r
}

// read gets the lease and records what it says.
func (k *leaseKeeper) read(ctx context.Context) (*coordinationv1.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, leaseRequestTimeout)
	defer cancel()
	l, err := k.client.Get(ctx, k.name, metav1.GetOptions{})
	now := k.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil {
		if apierrors.IsNotFound(err) {
			err = fmt.Errorf("the Lease %s/%s does not exist (the operator creates it): %w", k.ns, k.name, err)
		} else {
			err = fmt.Errorf("reading the Lease %s/%s: %w", k.ns, k.name, err)
		}
		k.err = err.Error()
		return nil, err
	}
	k.obs = observe(k.obs, k.record(l), now)
	k.lease = l
	k.err = ""
	return l, nil
}

// write updates l (read before) to name holder, conditional on its
// resourceVersion; a conflict is errLeaseTaken.
func (k *leaseKeeper) write(ctx context.Context, l *coordinationv1.Lease, holder string) error {
	ctx, cancel := context.WithTimeout(ctx, leaseRequestTimeout)
	defer cancel()
	l = l.DeepCopy()
	now := metav1.NewMicroTime(time.Now())
	prev := ptr.Deref(l.Spec.HolderIdentity, "")
	if holder != "" && prev != holder {
		l.Spec.AcquireTime = &now
		l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	}
	if holder == "" {
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[AnnotationReleasedBy] = prev
	} else {
		delete(l.Annotations, AnnotationReleasedBy)
		if k.uid != "" {
			if l.Annotations == nil {
				l.Annotations = map[string]string{}
			}
			l.Annotations[AnnotationHolderUID] = k.uid
		}
	}
	l.Spec.HolderIdentity = ptr.To(holder)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(LeaseDuration / time.Second))
	l.Spec.RenewTime = &now
	updated, err := k.client.Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		if apierrors.IsConflict(err) {
			err = fmt.Errorf("%w: %w", errLeaseTaken, err)
		} else if apierrors.IsNotFound(err) {
			err = fmt.Errorf("the Lease %s/%s does not exist (the operator creates it): %w", k.ns, k.name, err)
		}
		err = fmt.Errorf("writing %q into the Lease %s/%s: %w", holder, k.ns, k.name, err)
		k.mu.Lock()
		k.err = err.Error()
		k.mu.Unlock()
		return err
	}
	at := k.now()
	k.mu.Lock()
	k.obs = observe(k.obs, k.record(updated), at)
	k.lease = updated
	k.err = ""
	k.mu.Unlock()
	return nil
}

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
			deadline = since.Add(LeaseDuration + 2*LeaseRetryPeriod)
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
		case <-time.After(LeaseRetryPeriod):
		}
	}
}

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
		case <-time.After(LeaseRetryPeriod):
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
				k.failsafeSince = k.lastRenew.Add(LeaseRenewDeadline)
				entered, members, lastRenew = true, k.obs.Record.Members, now.Sub(k.lastRenew)
			}
			base := k.lastRenew
			if k.lastConfirmed.After(base) {
				base = k.lastConfirmed
			}
			if left := base.Add(LeaseRenewDeadline).Sub(now); left > 0 && left < wait {
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

// holds says the agent holds the lease and renewed it in time (or every
// member confirmed it in time, shouldFenceAt).
func (k *leaseKeeper) holds() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.holding && !shouldFenceAt(k.lastRenew, k.lastConfirmed, k.now()).Fence
}

// observation is the lease as last read.
func (k *leaseKeeper) observation() leaseObservation {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.obs
}

// status is the lease as the agent last read it.
func (k *leaseKeeper) status() *LeaseStatus {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.now()
	held := k.holding && !shouldFenceAt(k.lastRenew, k.lastConfirmed, now).Fence
	s := &LeaseStatus{
		Holder:       k.obs.Record.Holder,
		Held:         held,
		UnchangedFor: metav1.Duration{Duration: k.obs.unchangedFor(now).Round(time.Millisecond)},
		Error:        k.err,
	}
	if held && servingInFailsafe(k.lastRenew, k.lastConfirmed, now) {
		s.Failsafe, s.FailsafeSince = true, ptr.To(metav1.NewTime(k.lastRenew.Add(LeaseRenewDeadline)))
	}
	if k.grant.active(now) {
		s.ConfirmedFailsafeOf = k.grant.Caller
	}
	return s
}
