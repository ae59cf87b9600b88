package apply

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// applies counts the applies it is sent, keeps the annotations of the
// last, and answers each with the next resourceVersion, or with the one in
// unchanged when that is set (an apply that changed nothing), as the
// client decodes the API server's answer.
type applies struct {
	client.Client
	n, version  int
	unchanged   string
	annotations map[string]string
}

func (c *applies) answer(obj runtime.ApplyConfiguration) error {
	c.n++
	c.version++
	v := fmt.Sprint(c.version)
	if c.unchanged != "" {
		v = c.unchanged
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	var sent struct {
		Metadata map[string]any `json:"metadata"`
	}
	if err := json.Unmarshal(data, &sent); err != nil {
		return err
	}
	c.annotations = map[string]string{}
	if a, ok := sent.Metadata["annotations"].(map[string]any); ok {
		for k, v := range a {
			c.annotations[k] = v.(string)
		}
	}
	answer := map[string]any{}
	if err := json.Unmarshal(data, &answer); err != nil {
		return err
	}
	answer["metadata"].(map[string]any)["resourceVersion"] = v
	if data, err = json.Marshal(answer); err != nil {
		return err
	}
	return json.Unmarshal(data, obj)
}

func (c *applies) Apply(_ context.Context, obj runtime.ApplyConfiguration, _ ...client.ApplyOption) error {
	return c.answer(obj)
}

func (c *applies) Status() client.SubResourceWriter { return statusWriter{c} }

type statusWriter struct{ c *applies }

func (w statusWriter) Create(context.Context, client.Object, client.Object, ...client.SubResourceCreateOption) error {
	panic("not used")
}

func (w statusWriter) Update(context.Context, client.Object, ...client.SubResourceUpdateOption) error {
	panic("not used")
}

func (w statusWriter) Patch(context.Context, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
	panic("not used")
}

func (w statusWriter) Apply(_ context.Context, obj runtime.ApplyConfiguration, _ ...client.SubResourceApplyOption) error {
	return w.c.answer(obj)
}

func service(annotations map[string]string) *corev1ac.ServiceApplyConfiguration {
	svc := corev1ac.Service("db", "ns").WithSpec(corev1ac.ServiceSpec().WithSelector(map[string]string{"app": "db"}))
	if len(annotations) > 0 {
		svc.WithAnnotations(annotations)
	}
	return svc
}

// liveService is the Service as the API server stores desired at version.
func liveService(t *testing.T, desired *corev1ac.ServiceApplyConfiguration, version string) *corev1.Service {
	t.Helper()
	data, err := json.Marshal(desired)
	require.NoError(t, err)
	live := &corev1.Service{}
	require.NoError(t, json.Unmarshal(data, live))
	live.ResourceVersion = version
	return live
}

func TestWriterAppliesWhatCouldChangeSomething(t *testing.T) {
	ctx := context.Background()
	c := &applies{}
	w := NewWriter(c, "me")
	both := map[string]string{"keep": "1", "drop": "2"}

	changed, err := w.Apply(ctx, nil, service(both))
	require.NoError(t, err)
	assert.True(t, changed, "created")
	assert.Equal(t, 1, c.n)

	// The cache delivers the write: nothing to do.
	live := liveService(t, service(both), "1")
	changed, err = w.Apply(ctx, live, service(both))
	require.NoError(t, err)
	assert.False(t, changed)
	assert.Equal(t, 1, c.n, "the same apply at the version it returned")

	// Somebody else changes the object, not in anything desired sets: its
	// values are still there.
	other := live.DeepCopy()
	other.ResourceVersion = "5"
	other.Annotations["other-tool"] = "x"
	_, _ = w.Apply(ctx, other, service(both))
	assert.Equal(t, 1, c.n, "a change of somebody else's field")

	// ... or in a field desired sets: applied again.
	drifted := other.DeepCopy()
	drifted.ResourceVersion = "6"
	drifted.Annotations["keep"] = "changed"
	_, _ = w.Apply(ctx, drifted, service(both))
	assert.Equal(t, 2, c.n, "a changed value is set back")

	// An annotation desired no longer sets is still in live, which keeps
	// every value of desired: the apply is sent all the same, for the API
	// server to remove the annotation.
	live = liveService(t, service(both), "2")
	require.True(t, keeps(t, live, service(map[string]string{"keep": "1"})))
	changed, err = w.Apply(ctx, live, service(map[string]string{"keep": "1"}))
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, 3, c.n, "a removed annotation")
	_, _ = w.Apply(ctx, live, service(nil))
	assert.Equal(t, 4, c.n, "the last annotation removed")

	// A reconcile that reads the version the last apply was made on top of
	// (the cache has not delivered the write yet) does not send it again.
	_, _ = w.Apply(ctx, live, service(nil))
	assert.Equal(t, 4, c.n, "the same apply on top of the same stale version")

	// A new Writer (a restarted manager) knows nothing of what was applied:
	// its first apply is sent, and reports no change when the API server
	// returns the version it was made on.
	c.unchanged = "4"
	restarted := NewWriter(c, "me")
	changed, err = restarted.Apply(ctx, liveService(t, service(nil), "4"), service(nil))
	require.NoError(t, err)
	assert.False(t, changed, "an apply that changed nothing")
	assert.Equal(t, 5, c.n)
	_, _ = restarted.Apply(ctx, liveService(t, service(nil), "4"), service(nil))
	assert.Equal(t, 5, c.n)

	// The apply carries the hash of its request, which a restarted Writer
	// reads off the object: nothing to send for an object that still has
	// what the last request set, something when desired changed.
	hash := c.annotations[AppliedAnnotationPrefix+"me"]
	require.NotEmpty(t, hash)
	annotated := liveService(t, service(nil), "5")
	annotated.Annotations = map[string]string{AppliedAnnotationPrefix + "me": hash}
	_, _ = NewWriter(c, "me").Apply(ctx, annotated, service(nil))
	assert.Equal(t, 5, c.n, "the object's last request, after a restart")
	_, _ = NewWriter(c, "other").Apply(ctx, annotated, service(nil))
	assert.Equal(t, 6, c.n, "another field manager's last request is its own")
	_, _ = NewWriter(c, "me").Apply(ctx, annotated, service(map[string]string{"new": "1"}))
	assert.Equal(t, 7, c.n, "a changed request, after a restart")
}

// A status carries no annotation: after a restart, a status that has every
// value of desired is taken as written by desired.
func TestWriterStatusAfterARestart(t *testing.T) {
	ctx := context.Background()
	c := &applies{}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", ResourceVersion: "7"},
		Status: appsv1.StatefulSetStatus{ReadyReplicas: 1}}
	status := func(n int32) *appsv1ac.StatefulSetApplyConfiguration {
		return appsv1ac.StatefulSet("db", "ns").WithStatus(appsv1ac.StatefulSetStatus().WithReadyReplicas(n))
	}
	_, _ = NewWriter(c, "me").ApplyStatus(ctx, sts, status(1))
	assert.Equal(t, 0, c.n)
	_, _ = NewWriter(c, "me").ApplyStatus(ctx, sts, status(2))
	assert.Equal(t, 1, c.n)
}

// The last applies are kept apart per object: per kind, name and
// subresource (a field manager's StatefulSet and its status, a CronJob and
// a PVC of the same name).
func TestWriterKeepsObjectsApart(t *testing.T) {
	ctx := context.Background()
	c := &applies{}
	w := NewWriter(c, "me")
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", ResourceVersion: "7"}}
	// Fresh each time, as controllers build them: the client decodes the
	// API server's answer into what it applied.
	spec := func() *appsv1ac.StatefulSetApplyConfiguration {
		return appsv1ac.StatefulSet("db", "ns").WithLabels(map[string]string{"a": "1"})
	}
	status := func() *appsv1ac.StatefulSetApplyConfiguration {
		return appsv1ac.StatefulSet("db", "ns").WithStatus(appsv1ac.StatefulSetStatus().WithReadyReplicas(1))
	}
	pvc := corev1ac.PersistentVolumeClaim("db", "ns").WithLabels(map[string]string{"a": "1"})

	_, err := w.Apply(ctx, sts, spec())
	require.NoError(t, err)
	_, err = w.ApplyStatus(ctx, sts, status())
	require.NoError(t, err)
	_, err = w.Apply(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: sts.ObjectMeta}, pvc)
	require.NoError(t, err)
	assert.Equal(t, 3, c.n)

	_, _ = w.Apply(ctx, sts, spec())
	_, _ = w.ApplyStatus(ctx, sts, status())
	assert.Equal(t, 3, c.n, "each remembered on its own")
	_, _ = w.ApplyStatus(ctx, sts, appsv1ac.StatefulSet("db", "ns").WithStatus(appsv1ac.StatefulSetStatus().WithReadyReplicas(2)))
	assert.Equal(t, 4, c.n)
	_, _ = NewWriter(c, "another").ApplyStatus(ctx, sts, status())
	assert.Equal(t, 5, c.n, "another field manager's apply is its own")
}

func TestLive(t *testing.T) {
	ctx := context.Background()
	c := &getter{objects: map[string]bool{"ns/here": true}}
	got, err := Live(ctx, c, client.ObjectKey{Namespace: "ns", Name: "here"}, &corev1.Service{})
	require.NoError(t, err)
	assert.NotNil(t, got)
	got, err = Live(ctx, c, client.ObjectKey{Namespace: "ns", Name: "gone"}, &corev1.Service{})
	require.NoError(t, err)
	assert.Nil(t, got)
	_, err = Live(ctx, c, client.ObjectKey{Namespace: "ns", Name: "broken"}, &corev1.Service{})
	assert.Error(t, err)
}

// getter finds the objects it holds by namespace/name, and fails for the
// name broken.
type getter struct {
	objects map[string]bool
}

func (g *getter) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	switch {
	case key.Name == "broken":
		return apierrors.NewServiceUnavailable("down")
	case g.objects[key.String()]:
		obj.SetName(key.Name)
		return nil
	}
	return apierrors.NewNotFound(schema.GroupResource{Resource: "services"}, key.Name)
}

func (g *getter) List(context.Context, client.ObjectList, ...client.ListOption) error {
	panic("not used")
}
