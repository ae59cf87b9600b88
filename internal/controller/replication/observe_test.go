package replication

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestStatusCallsInParallel (issue 28, item 5): the agents are asked at
// the same time, each within a short deadline, so frozen pods delay a
// decision by one deadline, not one each; a Ready primary whose agent
// answers slowly once keeps its label and is not lost.
func TestStatusCallsInParallel(t *testing.T) {
	f, s := converged(t, 3)
	h := hooked(f.agents)
	s.agents = h
	h.setDelay("orders-1", 3*time.Second)
	h.setDelay("orders-2", 3*time.Second)
	start := time.Now()
	f.step(s)
	took := time.Since(start)
	assert.Less(t, took, 2500*time.Millisecond, "two frozen standbys delayed the decision by %s", took)
	st := f.get().Status.Replication
	assert.Equal(t, StateUnreachable, st.Instances[1].State)
	assert.Equal(t, StateUnreachable, st.Instances[2].State)
	assert.Equal(t, []string{"orders-0"}, f.labelled(dbv1.RolePrimary))

	h.setDelay("orders-1", 0)
	h.setDelay("orders-2", 0)
	f.step(s)
	h.setDelay("orders-0", 3*time.Second)
	f.step(s)
	assert.Equal(t, []string{"orders-0"}, f.labelled(dbv1.RolePrimary), "one slow answer of a Ready primary took its label")
	assert.Nil(t, f.get().Status.Replication.PrimaryLostSince)
	assert.Equal(t, "orders-0", f.get().Status.Replication.CurrentPrimary)
}

// primaryLease makes the Database's primary Lease name holder, renewed
// at renewed.
func (f *fixture) primaryLease(holder string, renewed time.Time) {
	ctx := context.Background()
	l := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: f.db.Namespace, Name: resources.LeaseName(f.db)}
	err := f.c.Get(ctx, key, l)
	l.Namespace, l.Name = key.Namespace, key.Name
	l.Spec.HolderIdentity = ptr.To(holder)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(agentapi.LeaseDuration / time.Second))
	l.Spec.RenewTime = &metav1.MicroTime{Time: renewed}
	if err != nil {
		require.NoError(f.t, f.c.Create(ctx, l))
		return
	}
	require.NoError(f.t, f.c.Update(ctx, l))
}

// TestStaleLeaseIsEvidenceOfLoss (issue 28, item 5): a primary whose agent
// does not answer is lost, its pod Ready or not, once its Lease has not
// changed for LeaseDuration on the operator's clock; a Lease that is
// renewed keeps it, and so does an agent that answers as a running primary
// (a primary cut off from the API server that keeps serving).
func TestStaleLeaseIsEvidenceOfLoss(t *testing.T) {
	t.Run("agent silent, Lease unchanged: lost", func(t *testing.T) {
		f, s := converged(t, 3)
		clock := clocked(s)
		f.primaryLease("orders-0", clock.Add(-time.Second))
		f.agents.SetUnreachable(f.db, "orders-0", true)
		f.step(s)
		*clock = clock.Add(agentapi.LeaseDuration - time.Second)
		f.step(s)
		assert.Nil(t, f.get().Status.Replication.PrimaryLostSince, "lost before the Lease was LeaseDuration old")
		*clock = clock.Add(2 * time.Second)
		f.step(s)
		require.NotNil(t, f.get().Status.Replication.PrimaryLostSince, "a silent primary whose Lease is stale is not lost: %s", f.condition().Message)
		assert.Contains(t, f.condition().Message, "primary lease")
		*clock = clock.Add(11 * time.Second)
		f.run(s, 4)
		assert.NotEqual(t, "orders-0", f.get().Status.Replication.CurrentPrimary, f.condition().Message)
	})
	t.Run("agent silent, a standby saw the Lease unchanged for LeaseDuration: lost at once", func(t *testing.T) {
		// every agent reads the Lease each second: a standby's clock
		// started at the last renew, this manager's only at its first
		// poll without an answer (a frozen primary was lost seconds
		// later than it had to be)
		f, s := converged(t, 3)
		clocked(s)
		f.primaryLease("orders-0", time.Now())
		f.agents.SetUnreachable(f.db, "orders-0", true)
		f.agents.SetLeaseUnchanged(f.db, "orders-2", agentapi.LeaseDuration-time.Second)
		f.step(s)
		assert.Nil(t, f.get().Status.Replication.PrimaryLostSince, "lost before a standby saw the Lease silent for LeaseDuration")
		f.agents.SetLeaseUnchanged(f.db, "orders-2", agentapi.LeaseDuration)
		f.step(s)
		require.NotNil(t, f.get().Status.Replication.PrimaryLostSince, "a standby saw the Lease silent for LeaseDuration: %s", f.condition().Message)
		assert.Contains(t, f.condition().Message, "as orders-2 sees it")
	})
	t.Run("agent silent, Lease renewed: not lost", func(t *testing.T) {
		f, s := converged(t, 3)
		clock := clocked(s)
		f.agents.SetUnreachable(f.db, "orders-0", true)
		for range 8 {
			f.primaryLease("orders-0", *clock)
			f.step(s)
			*clock = clock.Add(5 * time.Second)
		}
		assert.Nil(t, f.get().Status.Replication.PrimaryLostSince)
		assert.Contains(t, f.condition().Message, "status unreadable, pod Ready: no failover")
	})
	t.Run("agent silent, Lease stale, a standby confirms its failsafe: not lost", func(t *testing.T) {
		// the primary is cut off from the API server and from this
		// manager, not from its standbys: it serves on (issue 28)
		f, s := converged(t, 3)
		clock := clocked(s)
		f.primaryLease("orders-0", clock.Add(-time.Minute))
		f.agents.SetUnreachable(f.db, "orders-0", true)
		f.agents.SetConfirmsFailsafe(f.db, "orders-2", "orders-0")
		for range 8 {
			f.step(s)
			*clock = clock.Add(5 * time.Second)
		}
		assert.Nil(t, f.get().Status.Replication.PrimaryLostSince, f.condition().Message)
		assert.Contains(t, f.condition().Message, "orders-2 confirmed it serves without the API server")
		assert.Equal(t, "orders-0", f.get().Status.Replication.CurrentPrimary)
	})
	t.Run("agent answers as a running primary, Lease stale: not lost", func(t *testing.T) {
		f, s := converged(t, 3)
		clock := clocked(s)
		f.primaryLease("orders-0", clock.Add(-time.Minute))
		for range 8 {
			f.step(s)
			*clock = clock.Add(5 * time.Second)
		}
		assert.Nil(t, f.get().Status.Replication.PrimaryLostSince)
		assert.Equal(t, []string{"orders-0"}, f.labelled(dbv1.RolePrimary))
	})
}

// TestLostPrimaryIsAskedBriefly (issue 28, item 6): once a frozen primary
// (its agent's status call hangs) is found lost, the steps of its
// failover no longer wait statusTimeout for it each: every step waited
// 2 s for a frozen primary, which a frozen primary's loss→write paid
// three times over.
func TestLostPrimaryIsAskedBriefly(t *testing.T) {
	f, s := converged(t, 3)
	h := hooked(f.agents)
	s.agents = h
	clock := clocked(s)
	f.primaryLease("orders-0", clock.Add(-time.Minute))
	h.setDelay("orders-0", time.Minute)
	f.step(s)
	*clock = clock.Add(agentapi.LeaseDuration + time.Second)
	f.step(s)
	require.NotNil(t, f.get().Status.Replication.PrimaryLostSince, f.condition().Message)
	start := time.Now()
	f.step(s)
	took := time.Since(start)
	assert.Less(t, took, statusTimeout/2, "a step of the failover of a lost, frozen primary waited %s for it", took)
	assert.GreaterOrEqual(t, took, lostStatusTimeout, "the lost primary is still asked (it may have come back)")
}

// TestSilentTargetIsAskedBriefly (issue 28): a failover's target that
// stops answering (frozen) is asked within lostStatusTimeout once it was
// silent: each step of the failover, until another target replaces it,
// waited statusTimeout for it (the failover of the real-node fault "a
// failover target disappears" took 34 s instead of about 25).
func TestSilentTargetIsAskedBriefly(t *testing.T) {
	f, s := converged(t, 3)
	h := hooked(f.agents)
	s.agents = h
	clock := clocked(s)
	f.lose("orders-0")
	f.step(s)
	*clock = clock.Add(11 * time.Second)
	f.step(s)
	target := f.get().Status.Replication.TargetPrimary
	require.NotEqual(t, "orders-0", target, f.condition().Message)
	h.setDelay(target, time.Minute)
	f.step(s) // target silent: statusTimeout
	start := time.Now()
	f.step(s)
	took := time.Since(start)
	assert.Less(t, took, statusTimeout/2, "a step of the failover waited %s for its silent target", took)
}
