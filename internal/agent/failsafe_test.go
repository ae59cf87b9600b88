package agent

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// annotate sets an annotation of the fake keeper's lease, as the operator
// does.
func (f *fakeKeeper) annotate(t *testing.T, key, value string) {
	t.Helper()
	l := f.get(t)
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[key] = value
	_, err := f.cs.CoordinationV1().Leases("ns").Update(context.Background(), l, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// unreachable makes the fake API server answer nothing: every request
// fails as a dropped connection does.
func (f *fakeKeeper) unreachable(on *bool, mu *sync.Mutex) {
	f.cs.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if *on {
			return true, nil, errors.New("dial tcp 10.96.0.1:443: i/o timeout")
		}
		return false, nil, nil
	})
}

// members records the failsafe requests a keeper makes and answers them
// with refuse (pod: refusal; none: confirmed).
type members struct {
	mu     sync.Mutex
	asked  []string
	reqs   []agentapi.FailsafeRequest
	refuse map[string]error
}

func (m *members) ask(_ context.Context, pod string, req agentapi.FailsafeRequest) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.asked = append(m.asked, pod)
	m.reqs = append(m.reqs, req)
	return m.refuse[pod]
}

// roundNow runs a round when one is due; it says whether one was.
func (f *fakeKeeper) roundNow(ctx context.Context) bool {
	req, due := f.roundDue()
	if due {
		f.round(ctx, req)
	}
	return due
}

// An agent takes a released lease, or another's silent one, only when the
// lease's members annotation names it (or the lease has none).
func TestKeeperTakesOnlyAsAMember(t *testing.T) {
	ctx := context.Background()
	f := newFakeKeeper(t, "")
	f.annotate(t, "database.dbkeeper.io/members", "db-0,db-2")
	v, err := f.tryTake(ctx)
	require.NoError(t, err)
	assert.False(t, v.May, "took a lease whose members do not name it: %s", v.Reason)
	assert.False(t, f.holds())

	f.annotate(t, "database.dbkeeper.io/members", "db-0,db-1")
	v, err = f.tryTake(ctx)
	require.NoError(t, err)
	assert.True(t, v.May, v.Reason)
	assert.True(t, f.holds())
}

// A primary whose renews fail because the API server does not answer
// keeps serving past its renew deadline while every other member
// confirms it, round after round, and fences by the renew deadline after
// the last round in which all did; its status says it serves in
// failsafe.
func TestKeeperServesInFailsafeWhileEveryMemberConfirms(t *testing.T) {
	ctx := context.Background()
	f := newFakeKeeper(t, "")
	f.uid = "uid-1"
	f.annotate(t, agentapi.AnnotationMembers, "db-0,db-1,db-2")
	m := &members{refuse: map[string]error{}}
	f.ask = m.ask
	_, err := f.tryTake(ctx)
	require.NoError(t, err)
	rv := f.get(t).ResourceVersion
	var mu sync.Mutex
	down := true
	f.unreachable(&down, &mu)

	assert.False(t, f.roundNow(ctx), "a round before any renew failed")
	for i := 0; i < 30; i++ { // a minute
		f.advance(agentapi.LeaseRetryPeriod)
		f.renew(ctx)
		require.True(t, f.roundNow(ctx), "no round while renews fail")
		require.Empty(t, f.fenced, "fenced after %s although every member confirmed", time.Duration(i+1)*agentapi.LeaseRetryPeriod)
	}
	assert.True(t, f.holds())
	s := f.status()
	assert.True(t, s.Held)
	assert.True(t, s.Failsafe, "%+v", s)
	require.NotNil(t, s.FailsafeSince)
	sort.Strings(m.asked)
	assert.Equal(t, "db-0", m.asked[0])
	assert.Equal(t, "db-2", m.asked[len(m.asked)-1])
	assert.NotContains(t, m.asked, "db-1", "asked itself")
	assert.Equal(t, agentapi.FailsafeRequest{Pod: "db-1", HolderUID: "uid-1", ResourceVersion: rv, Members: []string{"db-0", "db-1", "db-2"}}, m.reqs[0])

	// db-2 stops confirming: fenced by the renew deadline after the last
	// round in which all did.
	m.mu.Lock()
	m.refuse["db-2"] = &agentapi.Error{Code: 409, Message: "this instance is promoting"}
	m.mu.Unlock()
	lastConfirmed := f.now()
	f.advance(agentapi.LeaseRetryPeriod)
	f.renew(ctx)
	f.roundNow(ctx)
	f.advance(agentapi.LeaseRenewDeadline - agentapi.LeaseRetryPeriod)
	f.renew(ctx)
	assert.Empty(t, f.fenced, "fenced before the deadline of the last confirmed round")
	assert.Equal(t, agentapi.LeaseRenewDeadline, f.now().Sub(lastConfirmed))
	f.advance(time.Millisecond)
	f.renew(ctx)
	require.Len(t, f.fenced, 1)
	assert.Contains(t, f.fenced[0], "every member last confirmed it")
	assert.False(t, f.holds())
	assert.False(t, f.status().Failsafe)
}

// With no other member (one instance) a round needs nobody: the primary
// serves through any API outage, and renews once the API server is back.
func TestKeeperAloneServesThroughAnOutage(t *testing.T) {
	ctx := context.Background()
	f := newFakeKeeper(t, "")
	f.annotate(t, agentapi.AnnotationMembers, "db-1")
	m := &members{}
	f.ask = m.ask
	_, err := f.tryTake(ctx)
	require.NoError(t, err)
	var mu sync.Mutex
	down := true
	f.unreachable(&down, &mu)
	for i := 0; i < 30; i++ {
		f.advance(agentapi.LeaseRetryPeriod)
		f.renew(ctx)
		f.roundNow(ctx)
	}
	assert.Empty(t, f.fenced)
	assert.Empty(t, m.asked)
	assert.True(t, f.status().Failsafe)

	mu.Lock()
	down = false
	mu.Unlock()
	f.advance(agentapi.LeaseRetryPeriod)
	f.renew(ctx)
	assert.Empty(t, f.fenced)
	s := f.status()
	assert.True(t, s.Held)
	assert.False(t, s.Failsafe, "still in failsafe after a renew")
	assert.Empty(t, s.Error)
	assert.False(t, f.roundNow(ctx), "a round after a renew succeeded")
}

// No failsafe when the API server answers (a 409: the record changed),
// nor for a lease without members: the holder fences at its deadline.
func TestKeeperFailsafeOnlyForAnOutageAndWithMembers(t *testing.T) {
	ctx := context.Background()
	t.Run("409", func(t *testing.T) {
		f := newFakeKeeper(t, "")
		f.annotate(t, agentapi.AnnotationMembers, "db-1")
		f.ask = (&members{}).ask
		_, err := f.tryTake(ctx)
		require.NoError(t, err)
		f.cs.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "db-primary", nil)
		})
		for i := 0; i < 6; i++ {
			f.advance(agentapi.LeaseRetryPeriod)
			f.renew(ctx)
			assert.False(t, f.roundNow(ctx), "a round after a 409")
		}
		require.Len(t, f.fenced, 1)
	})
	t.Run("no members", func(t *testing.T) {
		f := newFakeKeeper(t, "")
		f.ask = (&members{}).ask
		_, err := f.tryTake(ctx)
		require.NoError(t, err)
		var mu sync.Mutex
		down := true
		f.unreachable(&down, &mu)
		for i := 0; i < 6; i++ {
			f.advance(agentapi.LeaseRetryPeriod)
			f.renew(ctx)
			assert.False(t, f.roundNow(ctx), "a round for a lease without members")
		}
		require.Len(t, f.fenced, 1)
	})
	assert.True(t, apiUnreachable(errors.New("context deadline exceeded")))
	assert.True(t, apiUnreachable(apierrors.NewServiceUnavailable("etcd")))
	assert.True(t, apiUnreachable(apierrors.NewTimeoutError("slow", 1)))
	assert.False(t, apiUnreachable(apierrors.NewNotFound(schema.GroupResource{Resource: "leases"}, "db-primary")))
	assert.False(t, apiUnreachable(apierrors.NewForbidden(schema.GroupResource{Resource: "leases"}, "db-primary", errors.New("no"))))
	assert.False(t, apiUnreachable(errLeaseTaken))
}

// A member that confirmed a primary's failsafe takes no lease (a promote
// waits, then gives up) until LeaseDuration after its last confirmation,
// however long the record was silent; its status names the primary.
// It confirms nothing while it holds the lease or a take is in flight.
func TestKeeperConfirmationBlocksTakes(t *testing.T) {
	ctx := context.Background()
	f := newFakeKeeper(t, "db-0")
	f.annotate(t, agentapi.AnnotationMembers, "db-0,db-1")
	_, err := f.read(ctx)
	require.NoError(t, err)
	f.advance(time.Minute)
	req := agentapi.FailsafeRequest{Pod: "db-0", Members: []string{"db-0", "db-1"}}
	ok, why := f.confirm(req, false, false)
	require.True(t, ok, why)
	assert.Equal(t, "db-0", f.status().ConfirmedFailsafeOf)
	assert.Contains(t, f.failsafeHold(), "db-0 is serving in failsafe")
	f.advance(agentapi.LeaseDuration - time.Millisecond)
	v, err := f.tryTake(ctx)
	require.NoError(t, err)
	assert.False(t, v.May, "took the lease of a primary it confirmed %s ago", agentapi.LeaseDuration-time.Millisecond)
	assert.Contains(t, v.Reason, fmt.Sprintf("db-0 is serving in failsafe: it checked in %s ago", agentapi.LeaseDuration))
	assert.Zero(t, f.updates()-1, "wrote the lease") // the annotation's update only

	f.advance(time.Millisecond)
	assert.Empty(t, f.failsafeHold())
	assert.Empty(t, f.status().ConfirmedFailsafeOf)
	v, err = f.tryTake(ctx)
	require.NoError(t, err)
	assert.True(t, v.May, v.Reason)

	// it holds the lease now: no confirmation.
	ok, why = f.confirm(req, false, false)
	assert.False(t, ok)
	assert.Contains(t, why, "holds the primary lease")

	g := newFakeKeeper(t, "db-0")
	_, err = g.read(ctx)
	require.NoError(t, err)
	g.mu.Lock()
	g.taking = true
	g.mu.Unlock()
	ok, why = g.confirm(req, false, false)
	assert.False(t, ok)
	assert.Contains(t, why, "taking")
	ok, why = g.confirm(req, true, false)
	assert.False(t, ok, why)
}

// A fenced primary takes back a lease that still names it, never another
// holder's, not even a silent one.
func TestKeeperRetakesOnlyItsOwnLease(t *testing.T) {
	ctx := context.Background()
	f := newFakeKeeper(t, "db-1")
	v, err := f.retake(ctx)
	require.NoError(t, err)
	assert.True(t, v.May, v.Reason)
	assert.True(t, f.holds())

	g := newFakeKeeper(t, "db-0")
	_, err = g.read(ctx)
	require.NoError(t, err)
	g.advance(time.Hour)
	v, err = g.retake(ctx)
	require.NoError(t, err)
	assert.False(t, v.May, "a fenced primary took another's silent lease: %s", v.Reason)
	assert.Contains(t, v.Reason, "names db-0")
}
