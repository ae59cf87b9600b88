package apply

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// statusApplies counts status applies and sends none anywhere.
type statusApplies struct {
	client.Client
	n int
}

func (c *statusApplies) Status() client.SubResourceWriter { return statusWriter{c} }

type statusWriter struct{ c *statusApplies }

func (w statusWriter) Create(context.Context, client.Object, client.Object, ...client.SubResourceCreateOption) error {
	panic("not used")
}

func (w statusWriter) Update(context.Context, client.Object, ...client.SubResourceUpdateOption) error {
	panic("not used")
}

func (w statusWriter) Patch(context.Context, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
	panic("not used")
}

func (w statusWriter) Apply(context.Context, runtime.ApplyConfiguration, ...client.SubResourceApplyOption) error {
	w.c.n++
	return nil
}

func TestSentSkipsAnApplyTheCacheHasNotDelivered(t *testing.T) {
	ctx := context.Background()
	c := &statusApplies{}
	s := &Sent{}
	stale := liveStatefulSet() // resourceVersion 7, status.replicas 3
	ready := func(n int32) *appsv1ac.StatefulSetApplyConfiguration {
		return appsv1ac.StatefulSet("db", "ns").WithStatus(appsv1ac.StatefulSetStatus().WithReadyReplicas(n))
	}

	wrote, err := s.ApplyStatus(ctx, c, stale, ready(3), "me")
	require.NoError(t, err)
	assert.True(t, wrote)
	wrote, err = s.ApplyStatus(ctx, c, stale, ready(3), "me")
	require.NoError(t, err)
	assert.False(t, wrote, "the same apply on top of the same stale version")
	assert.Equal(t, 1, c.n)

	wrote, _ = s.ApplyStatus(ctx, c, stale, ready(2), "me")
	assert.True(t, wrote, "a different apply on the stale version is sent")
	_, _ = s.ApplyStatus(ctx, c, stale, ready(3), "other")
	assert.Equal(t, 3, c.n, "another field manager's apply is its own")

	// The cache moves to a version that lacks the write (someone changed it
	// since): Holds decides, and the apply is sent again.
	moved := stale.DeepCopy()
	moved.ResourceVersion = "9"
	wrote, _ = s.ApplyStatus(ctx, c, moved, ready(2), "me")
	assert.True(t, wrote)

	// Once live holds it, nothing is sent.
	held := moved.DeepCopy()
	held.ResourceVersion = "10"
	held.Status = appsv1.StatefulSetStatus{ReadyReplicas: 2}
	wrote, _ = s.ApplyStatus(ctx, c, held, ready(2), "me")
	assert.False(t, wrote)
	assert.Equal(t, 4, c.n)
}
