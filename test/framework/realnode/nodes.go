package realnode

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NodeInfo is one node of a real-node cluster, as the fault framework
// (test/framework/faults) acts on it.
type NodeInfo struct {
	// Name is the Node's name, Zone its topology.kubernetes.io/zone label
	// ("" on the single node).
	Name, Zone string
	// IP is its node IP; PodSubnet its pods' subnet.
	IP, PodSubnet string
	// Netns is the file of its network namespace, "" for the single
	// node, which runs in the host's.
	Netns string
	// Link is the host end of its veth on the bridge ("" on the single
	// node): down, the node is cut off from everything.
	Link string
	// Freezer is its cgroup in the v1 freezer hierarchy ("" on the
	// single node): its kubelet, containerd with its shims, kube-proxy and
	// every pod are in it or below it.
	Freezer string
}

// Nodes describes the cluster's nodes, in order.
func (n *Node) Nodes() []NodeInfo {
	infos := make([]NodeInfo, len(n.members))
	for i, m := range n.members {
		infos[i] = NodeInfo{Name: m.name, Zone: m.zone, IP: m.ip, PodSubnet: m.podSubnet}
		if m.multi() {
			infos[i].Netns, infos[i].Link, infos[i].Freezer = m.netnsPath(), m.veth, m.freezer()
		}
	}
	return infos
}

// NodeInfo describes the node name.
func (n *Node) NodeInfo(name string) (NodeInfo, error) {
	for _, info := range n.Nodes() {
		if info.Name == name {
			return info, nil
		}
	}
	return NodeInfo{}, fmt.Errorf("no node %q in this cluster", name)
}

// HoldServiceRouteOff moves the host's route for the Service range off
// node name (a fault makes it unusable) until the returned release, which
// may be called more than once; the route then stays where it is. A
// fault on the only node that is left fails.
func (n *Node) HoldServiceRouteOff(name string) (release func() error, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.members[0].multi() {
		return func() error { return nil }, nil
	}
	n.heldOff[name]++
	if n.serviceGateway == name {
		if err := n.routeServicesLocked(nil); err != nil {
			n.heldOff[name]--
			return nil, err
		}
	}
	done := false
	return func() error {
		n.mu.Lock()
		defer n.mu.Unlock()
		if !done {
			done = true
			n.heldOff[name]--
		}
		return nil
	}, nil
}

// ServiceGateway is the node the host's Service route goes through now;
// "" on the single node.
func (n *Node) ServiceGateway() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.serviceGateway
}

// allReady reports whether every node is Ready.
func (n *Node) allReady(ctx context.Context) bool {
	for _, m := range n.members {
		node := &corev1.Node{}
		if err := n.c.Client.Get(ctx, client.ObjectKey{Name: m.name}, node); err != nil {
			return false
		}
		if !NodeReady(node) {
			return false
		}
	}
	return true
}

// NodeReady reports whether node's Ready condition is True.
func NodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
