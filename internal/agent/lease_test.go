package agent

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// fakeKeeper is a keeper of the lease "db-primary" held by holder (empty:
// released) in a fake API, on a clock the test moves.
type fakeKeeper struct {
	*leaseKeeper
	cs     *fake.Clientset
	clock  time.Time
	fenced []string
	mu     sync.Mutex
}

func newFakeKeeper(t *testing.T, holder string) *fakeKeeper {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "db-primary", Namespace: "ns", ResourceVersion: "1"}}
	if holder != "" {
		l.Spec.HolderIdentity = ptr.To(holder)
		l.Spec.LeaseTransitions = ptr.To(int32(3))
	}
	cs := fake.NewClientset(l)
	f := &fakeKeeper{cs: cs, clock: t0}
	f.leaseKeeper = &leaseKeeper{client: cs.CoordinationV1().Leases("ns"), ns: "ns", name: "db-primary", self: "db-1",
		log: logr.Discard(), now: f.now}
	f.onFence = func(reason string) { f.mu.Lock(); f.fenced = append(f.fenced, reason); f.mu.Unlock() }
	return f
}

func (f *fakeKeeper) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.clock }

func (f *fakeKeeper) advance(d time.Duration) { f.mu.Lock(); f.clock = f.clock.Add(d); f.mu.Unlock() }

func (f *fakeKeeper) get(t *testing.T) *coordinationv1.Lease {
	l, err := f.cs.CoordinationV1().Leases("ns").Get(context.Background(), "db-primary", metav1.GetOptions{})
	require.NoError(t, err)
	return l
}

func (f *fakeKeeper) updates() int {
	n := 0
	for _, a := range f.cs.Actions() {
		if a.GetVerb() == "update" {
			n++
		}
	}
	return n
}

// The takeover of another's lease waits until it was unchanged for
// LeaseDuration on the keeper's clock, then writes holder, acquire time,
// duration and one more transition.
func TestKeeperTakesOverOnlyAfterLeaseDuration(t *testing.T) {
	ctx := context.Background()
	f := newFakeKeeper(t, "db-0")
	v, err := f.tryTake(ctx)
	require.NoError(t, err)
	assert.False(t, v.May, v.Reason)
	f.advance(agentapi.LeaseDuration - time.Millisecond)
	v, err = f.tryTake(ctx)
	require.NoError(t, err)
	assert.False(t, v.May, v.Reason)
	assert.Zero(t, f.updates(), "wrote the lease before it expired")

	f.advance(time.Millisecond)
	v, err = f.tryTake(ctx)
	require.NoError(t, err)
	assert.True(t, v.May, v.Reason)
	l := f.get(t)
	assert.Equal(t, "db-1", *l.Spec.HolderIdentity)
	assert.EqualValues(t, agentapi.LeaseDuration/time.Second, *l.Spec.LeaseDurationSeconds)
	assert.EqualValues(t, 4, *l.Spec.LeaseTransitions)
	assert.NotNil(t, l.Spec.AcquireTime)
	assert.True(t, f.holds())
	assert.True(t, f.status().Held)
}

// A renew that loses its conditional update (409) is a failed renew: the
// holder fences once the renew deadline passed since the last good one.
func TestKeeperConflictIsAFailedRenew(t *testing.T) {
	ctx := context.Background()
	f := newFakeKeeper(t, "")
	_, err := f.tryTake(ctx)
	require.NoError(t, err)
	require.True(t, f.holds())
	f.cs.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "db-primary", nil)
	})
	for range agentapi.LeaseRenewDeadline / agentapi.LeaseRetryPeriod {
		f.advance(agentapi.LeaseRetryPeriod)
		f.renew(ctx)
	}
	assert.Contains(t, f.status().Error, "changed since it was read")
	assert.Empty(t, f.fenced, "fenced before the deadline")
	f.advance(time.Millisecond)
	f.renew(ctx)
	require.Len(t, f.fenced, 1)
	assert.Contains(t, f.fenced[0], "renew deadline")
	assert.False(t, f.holds())
	f.advance(time.Minute)
	f.renew(ctx)
	assert.Len(t, f.fenced, 1, "fenced once per holding")
}

// A renew that reads another holder fences at once.
func TestKeeperFencesOnAnotherHolder(t *testing.T) {
	ctx := context.Background()
	f := newFakeKeeper(t, "")
	_, err := f.tryTake(ctx)
	require.NoError(t, err)
	l := f.get(t)
	l.Spec.HolderIdentity = ptr.To("db-2")
	_, err = f.cs.CoordinationV1().Leases("ns").Update(ctx, l, metav1.UpdateOptions{})
	require.NoError(t, err)
	f.advance(time.Second)
	f.renew(ctx)
	require.Len(t, f.fenced, 1)
	assert.Contains(t, f.fenced[0], "db-2")
	assert.Equal(t, "db-2", *f.get(t).Spec.HolderIdentity, "the renew overwrote the new holder")
}

// The watchdog fences a holder whose renew loop is stuck.
func TestKeeperWatchdogFencesWithoutTheRenewLoop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFakeKeeper(t, "")
	_, err := f.tryTake(ctx)
	require.NoError(t, err)
	go f.watchdog(ctx)
	time.Sleep(3 * watchdogTick)
	f.mu.Lock()
	assert.Empty(t, f.fenced)
	f.mu.Unlock()
	f.advance(agentapi.LeaseRenewDeadline + time.Millisecond)
	require.Eventually(t, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.fenced) == 1 }, time.Second, 10*time.Millisecond)
}

// A missing Lease is a failed read whose message says the operator
// creates it; a bounded acquire gives up.
func TestKeeperMissingLease(t *testing.T) {
	ctx := context.Background()
	f := newFakeKeeper(t, "")
	require.NoError(t, f.cs.CoordinationV1().Leases("ns").Delete(ctx, "db-primary", metav1.DeleteOptions{}))
	_, err := f.tryTake(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "does not exist (the operator creates it)")
	assert.Contains(t, f.status().Error, "the operator creates it")
	assert.False(t, f.holds())
}

// release empties only a lease this agent holds.
func TestKeeperReleasesOnlyItsOwnLease(t *testing.T) {
	ctx := context.Background()
	f := newFakeKeeper(t, "db-0")
	require.NoError(t, f.release(ctx))
	assert.Equal(t, "db-0", *f.get(t).Spec.HolderIdentity)

	f = newFakeKeeper(t, "")
	_, err := f.tryTake(ctx)
	require.NoError(t, err)
	require.NoError(t, f.release(ctx))
	released := f.get(t)
	assert.Equal(t, "", ptr.Deref(released.Spec.HolderIdentity, ""))
	assert.Equal(t, f.self, released.Annotations[AnnotationReleasedBy], "who released it: the last primary")
	assert.False(t, f.holds())

	_, err = f.tryTake(ctx)
	require.NoError(t, err)
	assert.NotContains(t, f.get(t).Annotations, AnnotationReleasedBy, "a held lease names no releaser")
}

// A pod recreated with the name of the holder (a force deletion: the old
// pod's server may still run on the same volume) does not take the lease
// as its own: it waits until the old pod's record stayed unchanged for
// LeaseDuration, and the old pod, seeing the new one hold it, fences.
func TestKeeperPodOfTheSameNameIsAnotherHolder(t *testing.T) {
	ctx := context.Background()
	old := newFakeKeeper(t, "")
	old.uid = "uid-old"
	_, err := old.tryTake(ctx)
	require.NoError(t, err)
	assert.Equal(t, "uid-old", old.get(t).Annotations[AnnotationHolderUID])

	next := &fakeKeeper{cs: old.cs, clock: t0}
	next.leaseKeeper = &leaseKeeper{client: old.cs.CoordinationV1().Leases("ns"), ns: "ns", name: "db-primary", self: "db-1", uid: "uid-new",
		log: logr.Discard(), now: next.now}
	v, err := next.tryTake(ctx)
	require.NoError(t, err)
	assert.False(t, v.May, "took the lease its previous pod holds: %s", v.Reason)
	next.advance(agentapi.LeaseDuration)
	v, err = next.tryTake(ctx)
	require.NoError(t, err)
	assert.True(t, v.May, v.Reason)
	assert.Equal(t, "uid-new", next.get(t).Annotations[AnnotationHolderUID])

	_, err = old.read(ctx)
	require.NoError(t, err)
	assert.True(t, shouldFence(old.self, old.now(), &old.obs.Record, old.now()).Fence, "the old pod keeps serving")
}
