package agent

import (
	"context"
	"errors"
	"fmt"
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

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// leaseRequestTimeout bounds one read or write of the lease, so that a
// hung API server cannot hold a renew past the renew deadline.
const leaseRequestTimeout = agentapi.LeaseRetryPeriod

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
	ask func(ctx context.Context, pod string, req agentapi.FailsafeRequest) error
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
	if v, ok := l.Annotations[agentapi.AnnotationMembers]; ok {
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
	l.Spec.LeaseDurationSeconds = ptr.To(int32(agentapi.LeaseDuration / time.Second))
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
func (k *leaseKeeper) status() *agentapi.LeaseStatus {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.now()
	held := k.holding && !shouldFenceAt(k.lastRenew, k.lastConfirmed, now).Fence
	s := &agentapi.LeaseStatus{
		Holder:       k.obs.Record.Holder,
		Held:         held,
		UnchangedFor: metav1.Duration{Duration: k.obs.unchangedFor(now).Round(time.Millisecond)},
		Error:        k.err,
	}
	if held && servingInFailsafe(k.lastRenew, k.lastConfirmed, now) {
		s.Failsafe, s.FailsafeSince = true, ptr.To(metav1.NewTime(k.lastRenew.Add(agentapi.LeaseRenewDeadline)))
	}
	if k.grant.active(now) {
		s.ConfirmedFailsafeOf = k.grant.Caller
	}
	return s
}
