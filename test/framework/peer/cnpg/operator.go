package cnpg

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LeaderElectionLease is the Lease the operator's replicas elect their
// leader with (internal/cmd/manager/controller's LeaderElectionID); its
// lease duration is 15 s, renew deadline 10 s (the defaults of
// --leader-lease-duration and --leader-renew-deadline).
const LeaderElectionLease = "db9c8771.cnpg.io"

// SetOperatorReplicas runs n replicas of the operator, on distinct nodes
// when n > 1 (a required pod anti-affinity on the hostname), with no node
// selector, and waits until the Deployment rolled out and each replica
// is Ready.
func SetOperatorReplicas(ctx context.Context, c client.Client, n int32, timeout time.Duration) error {
	d := &appsv1.Deployment{}
	key := client.ObjectKey{Namespace: OperatorNamespace, Name: OperatorDeployment}
	if err := c.Get(ctx, key, d); err != nil {
		return fmt.Errorf("reading CloudNativePG's operator Deployment: %w", err)
	}
	patch := client.MergeFrom(d.DeepCopy())
	d.Spec.Replicas = ptr.To(n)
	d.Spec.Template.Spec.NodeSelector = nil
	d.Spec.Template.Spec.Affinity = nil
	if n > 1 {
		d.Spec.Template.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: d.Spec.Selector.DeepCopy(), TopologyKey: corev1.LabelHostname,
			}},
		}}
	}
	if err := c.Patch(ctx, d, patch); err != nil {
		return fmt.Errorf("setting CloudNativePG's operator to %d replicas: %w", n, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, why := replicasReady(ctx, c, n)
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("CloudNativePG's operator not at %d Ready replicas on distinct nodes within %s: %s; its pods: %s", n, timeout, why, podsSaid(c))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// replicasReady says whether the operator's Deployment rolled out with n
// Ready pods, none terminating, each on a node of its own.
func replicasReady(ctx context.Context, c client.Client, n int32) (bool, string) {
	d := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: OperatorNamespace, Name: OperatorDeployment}, d); err != nil {
		return false, err.Error()
	}
	if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas != n || d.Status.ReadyReplicas != n || d.Status.Replicas != n {
		return false, fmt.Sprintf("%d updated, %d ready of %d", d.Status.UpdatedReplicas, d.Status.ReadyReplicas, d.Status.Replicas)
	}
	pods, err := OperatorPods(ctx, c)
	if err != nil {
		return false, err.Error()
	}
	nodes := map[string]bool{}
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			return false, p.Name + " terminating"
		}
		nodes[p.Spec.NodeName] = true
	}
	if len(pods) != int(n) || len(nodes) != int(n) {
		return false, fmt.Sprintf("%d pods on %d nodes", len(pods), len(nodes))
	}
	return true, ""
}

// OperatorPods lists the operator's pods.
func OperatorPods(ctx context.Context, c client.Client) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(OperatorNamespace), client.MatchingLabels{"app.kubernetes.io/name": "cloudnative-pg"}); err != nil {
		return nil, fmt.Errorf("listing CloudNativePG's operator pods: %w", err)
	}
	return pods.Items, nil
}

// OperatorLeader is the operator pod that holds the leader-election Lease
// now, "" when none does (or the holder is not a pod of the operator
// any more).
func OperatorLeader(ctx context.Context, c client.Client) (*corev1.Pod, error) {
	lease := &coordinationv1.Lease{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: OperatorNamespace, Name: LeaderElectionLease}, lease); err != nil {
		return nil, fmt.Errorf("reading CloudNativePG's leader-election Lease: %w", err)
	}
	if lease.Spec.HolderIdentity == nil {
		return nil, nil
	}
	holder, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "_")
	pods, err := OperatorPods(ctx, c)
	if err != nil {
		return nil, err
	}
	for i := range pods {
		if pods[i].Name == holder && pods[i].DeletionTimestamp == nil {
			return &pods[i], nil
		}
	}
	return nil, nil
}

// Switchover asks the operator to promote instance, as `kubectl cnpg
// promote` does: status.targetPrimary and the Switchover phase.
func (cl *Cluster) Switchover(ctx context.Context, instance string) error {
	u := ClusterObject(ClusterOptions{Namespace: cl.Namespace, Name: cl.Name})
	patch := fmt.Appendf(nil, `{"status":{"targetPrimary":%q,"targetPrimaryTimestamp":%q,"phase":"Switchover in progress","phaseReason":%q}}`,
		instance, time.Now().Format(metav1.RFC3339Micro), "Switching over to "+instance)
	if err := cl.client.Status().Patch(ctx, u, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		return fmt.Errorf("switching Cluster %s/%s over to %s: %w", cl.Namespace, cl.Name, instance, err)
	}
	return nil
}
