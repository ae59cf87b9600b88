package replication

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// drainTaints are the taints of a node about to be emptied by something
// other than a cordon: the cluster autoscaler's and Karpenter's (old and
// new key). A cordon (spec.unschedulable, which `kubectl drain` sets
// first) adds node.kubernetes.io/unschedulable as well.
var drainTaints = []string{
	corev1.TaintNodeUnschedulable,
	"ToBeDeletedByClusterAutoscaler",
	"karpenter.sh/disrupted",
	"karpenter.sh/disruption",
}

// nodeDrain says why node is being emptied ("" when it is not): its pods
// will be evicted, and a primary on it should hand over first.
func nodeDrain(node *corev1.Node) string {
	if node.Spec.Unschedulable {
		return "is cordoned (being drained)"
	}
	for _, t := range node.Spec.Taints {
		for _, key := range drainTaints {
			if t.Key == key && t.Effect != corev1.TaintEffectPreferNoSchedule {
				return fmt.Sprintf("carries the taint %s:%s (being emptied)", t.Key, t.Effect)
			}
		}
	}
	return ""
}

// staysFirst orders an instance on a node that stays before one on a
// node being drained (it would be evicted next): -1, 1, or 0 when both
// or neither are.
func staysFirst(x, y *Instance) int {
	xd, yd := x.NodeDrain != "", y.NodeDrain != ""
	switch {
	case xd == yd:
		return 0
	case yd:
		return -1
	default:
		return 1
	}
}

// readNodes fills each instance's Node and NodeDrain from its pod and the
// cached Node. A Node that is gone drains nothing here: its pods are lost,
// which the lost-primary rules handle.
func (s *syncer) readNodes(ctx context.Context, insts []Instance, pods map[string]*corev1.Pod) error {
	for i := range insts {
		pod := pods[insts[i].Name]
		if pod == nil || pod.Spec.NodeName == "" {
			continue
		}
		insts[i].Node = pod.Spec.NodeName
		node := &corev1.Node{}
		err := s.client.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, node)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("getting Node %s: %w", pod.Spec.NodeName, err)
		default:
			insts[i].NodeDrain = nodeDrain(node)
		}
	}
	return nil
}

// leaveDrainingNode: the primary's node is being emptied. The primary's
// PodDisruptionBudget refuses its eviction, so the drain retries while
// the primary hands over to a standby on a node that stays (a
// switchover: no acknowledged write is lost, and writes pause for its
// gap only, not for a failover's detection); the former primary is then
// a standby, evicted under the standbys' budget. With no such standby it
// does not decide: the drain waits, and the condition says why.
func leaveDrainingNode(p *Plan, s *serving) bool {
	prim := s.prim
	if prim.NodeDrain == "" || s.n < 2 {
		return false
	}
	if target := bestStandby(s.in.DB, s.in.Instances, s.byName, prim, nil); target != "" && s.byName[target].NodeDrain == "" {
		startSwitchover(p, target, fmt.Sprintf("the primary's node %s %s", prim.Node, prim.NodeDrain))
		return true
	}
	s.drainBlocked = fmt.Sprintf("the primary's node %s %s, and no streaming standby on another node can take over: "+
		"its eviction waits (PodDisruptionBudget %s) until one can", prim.Node, prim.NodeDrain, resources.PrimaryDisruptionBudgetName(s.in.DB))
	return false
}

// indexPodNode indexes the cached engine pods by spec.nodeName.
const indexPodNode = "spec.nodeName"

// podNode is the indexPodNode of a pod.
func podNode(obj client.Object) []string {
	if n := obj.(*corev1.Pod).Spec.NodeName; n != "" {
		return []string{n}
	}
	return nil
}

// databasesOnNode enqueues the Databases with an engine pod on a node.
func databasesOnNode(c client.Reader) handler.MapFunc {
	toDB := facet.DatabaseOf(resources.ComponentDatabase)
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.MatchingFields{indexPodNode: obj.GetName()},
			client.MatchingLabels{resources.LabelComponent: resources.ComponentDatabase}); err != nil {
			log.FromContext(ctx).Error(err, "Listing the engine pods of a node", "Node", klog.KObj(obj))
			return nil
		}
		seen := map[reconcile.Request]bool{}
		var out []reconcile.Request
		for i := range pods.Items {
			for _, r := range toDB(ctx, &pods.Items[i]) {
				if !seen[r] {
					seen[r] = true
					out = append(out, r)
				}
			}
		}
		return out
	}
}

// nodeDrainChanged lets through the Node updates that start or end a
// drain: not the kubelet's status updates.
func nodeDrainChanged() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return nodeDrain(e.ObjectOld.(*corev1.Node)) != nodeDrain(e.ObjectNew.(*corev1.Node))
		},
	}
}
