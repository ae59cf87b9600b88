package realnode

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/test/framework/manifests"
)

// TestKustomizeInstallRuns (issue 29): the kustomize install, with the
// manager image this node has, applied to the node: the manager's pod
// starts and turns Ready (before, it exited at start: the install gave no
// --agent-image). It watches only a namespace of its own, so that it
// touches no other test's Database; what it leaves (its namespace, its
// cluster roles) is removed after, the CustomResourceDefinition (the
// suite's) is not.
func TestKustomizeInstallRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	objs, err := manifests.Kustomize(local.ManagerImage())
	require.NoError(t, err)
	watched := newNamespace(t)
	var deployment client.ObjectKey
	for _, u := range objs {
		switch u.GetKind() {
		case "CustomResourceDefinition":
			continue // the suite's, already installed
		case "Deployment":
			deployment = client.ObjectKeyFromObject(u)
			containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
			c := containers[0].(map[string]any)
			c["args"] = append(c["args"].([]any), "--watch-namespaces="+watched)
			c["imagePullPolicy"] = string(corev1.PullNever) // imported into the node, never pulled
			require.NoError(t, unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers"))
		}
		require.NoError(t, k8s.Patch(ctx, u, client.Apply, client.ForceOwnership, client.FieldOwner("kustomize-test")), "%s %s", u.GetKind(), u.GetName())
		t.Cleanup(func() {
			if u.GetKind() != "Namespace" && u.GetNamespace() != "" {
				return // goes with its namespace
			}
			_ = k8s.Delete(context.Background(), u)
		})
	}
	require.NotEmpty(t, deployment.Name, "a Deployment in the kustomize install")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		d := &appsv1.Deployment{}
		if assert.NoError(ct, k8s.Get(ctx, deployment, d)) {
			assert.Equal(ct, int32(1), d.Status.ReadyReplicas, "the manager Ready (conditions %+v)", d.Status.Conditions)
		}
	}, timeout, 500*time.Millisecond)
	pods := &corev1.PodList{}
	require.NoError(t, k8s.List(ctx, pods, client.InNamespace(deployment.Namespace)))
	for _, p := range pods.Items {
		for _, s := range p.Status.ContainerStatuses {
			assert.Zero(t, s.RestartCount, "the manager %s restarted", p.Name)
		}
	}
}
