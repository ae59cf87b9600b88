package replication

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// TestSwitchoverPromotionOutlastsItsCall: the target's promotion outlasts
// the operator's call (the call ends with its deadline; the agent follows
// pg_promote to its end, Promoting meanwhile, and answers another promote
// 409, busy). The switchover waits for it without a failure in
// ReplicationReady's message, a Warning, another promote or a fallback,
// and completes once the target runs as the primary.
func TestSwitchoverPromotionOutlastsItsCall(t *testing.T) {
	f, s := converged(t, 3)
	f.agents.SetSlowPromote(f.db, "orders-2", true)
	f.eventsText()
	f.annotate("orders-2")
	f.run(s, 3) // started, demoted, promote asked (its call failed)
	require.Equal(t, []string{"demote orders-0", "promote orders-2"}, f.agents.Calls()[3:])
	c := f.condition()
	assert.Equal(t, dbv1.ReasonSwitchingOver, c.Reason)
	assert.Contains(t, c.Message, "orders-2 is promoting")
	assert.NotContains(t, c.Message, "failed")

	for range 3 {
		f.step(s)
		c = f.condition()
		assert.Equal(t, dbv1.ReasonSwitchingOver, c.Reason)
		assert.Contains(t, c.Message, "waiting for orders-2 to finish its promotion")
		assert.NotContains(t, c.Message, "failed")
		assert.NotContains(t, c.Message, "falls back")
	}
	assert.Len(t, f.agents.Calls(), 5, "promote asked once")

	// A promote that meets the running promotion (409, busy) is work in
	// progress too.
	pod := &corev1.Pod{}
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: "orders-2"}, pod))
	st := f.get().Status.Replication
	err := s.act(context.Background(), f.get(), &Plan{CurrentPrimary: st.CurrentPrimary, TargetPrimary: st.TargetPrimary,
		Action: Action{Kind: ActPromote, Pod: "orders-2", From: "orders-0", LSN: st.SwitchoverLSN}}, map[string]*corev1.Pod{"orders-2": pod})
	var ip *inProgress
	require.True(t, errors.As(err, &ip), "%v", err)
	assert.Contains(t, ip.msg, "orders-2 is promoting")

	f.agents.CompletePromotion(f.db, "orders-2")
	f.run(s, 4)
	st = f.get().Status.Replication
	assert.Equal(t, "orders-2", st.CurrentPrimary)
	assert.Equal(t, []string{"orders-2"}, f.labelled(dbv1.RolePrimary))
	assert.Equal(t, dbv1.ReasonReplicating, f.condition().Reason, f.condition().Message)
	assert.Equal(t, agentapi.RolePrimary, f.agents.Roles(f.db)["orders-2"])
	ev := f.eventsText()
	assert.Contains(t, ev, ReasonSwitchoverCompleted)
	for _, line := range strings.Split(ev, "\n") {
		if strings.HasPrefix(line, "Warning") {
			assert.Contains(t, line, "ReplicationReady is False", "no Warning but the condition's")
		}
	}
	assert.NotContains(t, ev, ReasonSwitchoverFellBack)
}
