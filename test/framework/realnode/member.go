package realnode

import (
	"fmt"
	"path/filepath"
	"strconv"
)

// The layout of several nodes (Options.Nodes > 1): node i (1..N) is
// NodeNamePrefix+i, in the network namespace dbk-n<i> joined to the bridge
// by the veth dbk-v<i> (its end in the namespace is eth0), with the node
// IP 198.18.0.(10+i) and the pods' subnet 198.18.<i>.0/24 behind a bridge
// of its own (memberBridge) in the namespace; its processes and its pods
// live under the cgroup NodeNamePrefix+i of each hierarchy.
const (
	// NodeNamePrefix starts the names of the nodes of a cluster of several
	// (dbk-node-1, dbk-node-2, ...).
	NodeNamePrefix = "dbk-node-"
	// MaxNodes is the largest Options.Nodes.
	MaxNodes = 20
	// memberBridge is the CNI bridge in a node's network namespace.
	memberBridge = "dbk-pods"
	// memberLink is a node's end of its veth, in its namespace.
	memberLink = "eth0"
)

// zones are the topology.kubernetes.io/zone labels of the nodes, in turn.
var zones = []string{"zone-a", "zone-b", "zone-c"}

// member is one kubelet node of the real node: the only one, in the
// host's network namespace (index 0, the layout of a single node), or
// one of several, each in a network namespace of its own.
type member struct {
	index int
	name  string
	// zone is its topology.kubernetes.io/zone label; "" for the single
	// node.
	zone string
	// netns is its network namespace's name; "" for the host's.
	netns string
	// veth is the host end of its link to the bridge; "" for the single
	// node.
	veth string
	// ip is its node IP.
	ip string
	// podSubnet, podFrom, podTo and podGateway are its pods' addresses.
	podSubnet, podFrom, podTo, podGateway string
	// bridge is its CNI bridge.
	bridge string
}

// members returns the layout of nodes nodes (0 or 1: the single node).
func members(nodes int) []*member {
	if nodes <= 1 {
		return []*member{{
			name: NodeName, ip: NodeIP, bridge: Bridge,
			podSubnet: podSubnet, podFrom: podRangeFrom, podTo: podRangeTo, podGateway: NodeIP,
		}}
	}
	ms := make([]*member, nodes)
	for i := range ms {
		n := i + 1
		net := "198.18." + strconv.Itoa(n) + "."
		ms[i] = &member{
			index: n, name: NodeNamePrefix + strconv.Itoa(n), zone: zones[i%len(zones)],
			netns: "dbk-n" + strconv.Itoa(n), veth: "dbk-v" + strconv.Itoa(n),
			ip: "198.18.0." + strconv.Itoa(10+n), bridge: memberBridge,
			podSubnet: net + "0/24", podFrom: net + "10", podTo: net + "250", podGateway: net + "1",
		}
	}
	return ms
}

// multi reports whether the member is one of several.
func (m *member) multi() bool { return m.netns != "" }

// netnsPath is the file of its network namespace.
func (m *member) netnsPath() string { return "/run/netns/" + m.netns }

// dir is where its containerd, CNI, kubelet and kube-proxy files live:
// the cluster directory itself for the single node (today's layout).
func (m *member) dir(clusterDir string) string {
	if !m.multi() {
		return clusterDir
	}
	return filepath.Join(clusterDir, "nodes", m.name)
}

// proc is the name of its component's process (and log): the
// component's own for the single node, "<component>-<i>" for one of
// several.
func (m *member) proc(component string) string {
	if !m.multi() {
		return component
	}
	return component + "-" + strconv.Itoa(m.index)
}

// containerdRoot is its containerd's root, cached between runs: the
// single node's, shared with node 1, and one per further node.
func (m *member) containerdRoot() (string, error) {
	root, err := containerdRoot()
	if err != nil || m.index <= 1 {
		return root, err
	}
	return root + "-" + strconv.Itoa(m.index), nil
}

// cgroups are the cgroup directories of a node of several, one per
// hierarchy: the kubelet's cgroupRoot, and (in the freezer hierarchy)
// where its components run.
func (m *member) cgroups() []string {
	var dirs []string
	for _, h := range cgroupHierarchies() {
		dirs = append(dirs, h+"/"+m.name)
	}
	return dirs
}

// freezer is its cgroup in the v1 freezer hierarchy: every process of the
// node is in it or below it.
func (m *member) freezer() string { return "/sys/fs/cgroup/freezer/" + m.name }

// servingCert is the name of the kubelet's serving certificate in pki.
func (m *member) servingCert() string {
	if !m.multi() {
		return "kubelet-serving"
	}
	return "kubelet-serving-" + m.name
}

// kubeconfig is the name of the kubelet's kubeconfig in pki.
func (m *member) kubeconfig() string {
	if !m.multi() {
		return "kubelet.kubeconfig"
	}
	return "kubelet-" + m.name + ".kubeconfig"
}

// String names the member for messages.
func (m *member) String() string {
	if !m.multi() {
		return m.name
	}
	return fmt.Sprintf("%s (%s in netns %s, pods %s)", m.name, m.ip, m.netns, m.podSubnet)
}
