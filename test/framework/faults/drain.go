package faults

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Cordon marks node name unschedulable (kubectl cordon) until the
// returned Undo makes it schedulable again.
func (f *NodeFaults) Cordon(ctx context.Context, name string) (Undo, error) {
	if err := f.setUnschedulable(ctx, name, true); err != nil {
		return nil, err
	}
	return once(func() error { return f.setUnschedulable(context.Background(), name, false) }), nil
}

func (f *NodeFaults) setUnschedulable(ctx context.Context, name string, on bool) error {
	node := &corev1.Node{}
	if err := f.i.client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		return fmt.Errorf("getting node %s: %w", name, err)
	}
	patch := client.MergeFrom(node.DeepCopy())
	node.Spec.Unschedulable = on
	if err := f.i.client.Patch(ctx, node, patch); err != nil {
		return fmt.Errorf("setting node %s unschedulable=%t: %w", name, on, err)
	}
	return nil
}

// Drain cordons node name and evicts its pods as `kubectl drain
// --ignore-daemonsets --delete-emptydir-data` does: through the eviction
// API, so that PodDisruptionBudgets hold (an eviction they refuse is
// retried every second), skipping DaemonSet and mirror pods; it returns
// once every pod it evicted is gone (deleted, not only stopped), or with
// ctx's error. The Undo uncordons the node.
func (f *NodeFaults) Drain(ctx context.Context, name string) (Undo, error) {
	uncordon, err := f.Cordon(ctx, name)
	if err != nil {
		return nil, err
	}
	evicted := map[client.ObjectKey]types.UID{}
	for {
		pods, err := f.podsOn(ctx, name)
		if err != nil {
			return uncordon, err
		}
		left := 0
		for i := range pods {
			pod := &pods[i]
			key := client.ObjectKeyFromObject(pod)
			if _, ok := evicted[key]; ok && evicted[key] == pod.UID {
				continue
			}
			left++
			ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name}}
			err := f.i.client.SubResource("eviction").Create(ctx, pod, ev)
			switch {
			case err == nil || apierrors.IsNotFound(err):
				evicted[key] = pod.UID
			case apierrors.IsTooManyRequests(err): // a PodDisruptionBudget: retried
			default:
				return uncordon, fmt.Errorf("evicting pod %s/%s: %w", pod.Namespace, pod.Name, err)
			}
		}
		for key, uid := range evicted {
			pod := &corev1.Pod{}
			err := f.i.client.Get(ctx, key, pod)
			if err == nil && pod.UID == uid {
				left++
			} else if err != nil && !apierrors.IsNotFound(err) {
				return uncordon, fmt.Errorf("getting pod %s: %w", key, err)
			}
		}
		if left == 0 {
			return uncordon, nil
		}
		select {
		case <-ctx.Done():
			return uncordon, errors.Join(fmt.Errorf("draining node %s: %d pods left", name, left), ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// podsOn lists the pods on node name that a drain evicts.
func (f *NodeFaults) podsOn(ctx context.Context, name string) ([]corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := f.i.client.List(ctx, list, client.MatchingFields{"spec.nodeName": name}); err != nil {
		return nil, fmt.Errorf("listing the pods of node %s: %w", name, err)
	}
	var pods []corev1.Pod
	for _, p := range list.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
			continue
		}
		if owner := metav1.GetControllerOf(&p); owner != nil && owner.Kind == "DaemonSet" {
			continue
		}
		pods = append(pods, p)
	}
	return pods, nil
}
