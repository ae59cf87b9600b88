package realnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// memberGuardRules is the guard table in a node's network namespace: it
// forwards nothing outside the contained range, and IPv6 only on the link
// (neighbour discovery); the node sends nothing outside it but link-local
// multicast (IGMP). (The
// namespace has no default route either; the host's guard table stops
// anything leaving the bridge.)
const memberGuardRules = `table inet ` + guardTable + ` {
	chain forward {
		type filter hook forward priority -10; policy accept;
		ip daddr != ` + containedRange + ` counter drop comment "pods reach only the contained range"
		ip6 daddr != { fe80::/10, ff02::/16 } counter drop comment "IPv6 on the link only"
	}
	chain output {
		type filter hook output priority -10; policy accept;
		oifname != "lo" ip daddr != { ` + containedRange + `, 224.0.0.0/24 } counter drop comment "the node reaches only the contained range"
	}
}
`

// inNetns returns the command line that runs name with args in the
// member's network namespace only (nsenter --net: unlike `ip netns exec`
// it keeps the host's mount namespace, where the kubelet's mounts must be
// visible to containerd), or the command itself for the single node.
func (m *member) inNetns(name string, args ...string) []string {
	if !m.multi() {
		return append([]string{name}, args...)
	}
	return append([]string{"nsenter", "--net=" + m.netnsPath(), "--", name}, args...)
}

// run runs a host command in the member's network namespace.
func (m *member) run(stdin string, name string, args ...string) (string, error) {
	cmd := m.inNetns(name, args...)
	return host(stdin, cmd[0], cmd[1:]...)
}

// setUpMembers gives each of several nodes its network namespace, linked
// to the bridge by a veth, with its node IP, routes to the other nodes'
// pods, forwarding and a guard table of its own; the host routes to each
// node's pods and the Service range through a node; and creates its
// cgroups. Everything is recorded in the journal first. The host's route
// for the Service range goes through the first node (RouteServicesAvoiding
// moves it).
func (n *Node) setUpMembers() error {
	ms := n.members
	if !ms[0].multi() {
		return nil
	}
	var netns, veths, cgroups, roots []string
	for _, m := range ms {
		if _, err := os.Stat(m.netnsPath()); err == nil {
			return fmt.Errorf("network namespace %s exists already: `make node-down`, or `ip netns del %s` if it is not the node's", m.netns, m.netns)
		}
		if _, err := os.Stat("/sys/class/net/" + m.veth); err == nil {
			return fmt.Errorf("link %s exists already: `make node-down`, or `ip link del %s` if it is not the node's", m.veth, m.veth)
		}
		netns, veths = append(netns, m.netns), append(veths, m.veth)
		for _, cg := range m.cgroups() {
			if _, err := os.Stat(cg); os.IsNotExist(err) {
				cgroups = append(cgroups, cg)
			}
		}
		root, err := m.containerdRoot()
		if err != nil {
			return err
		}
		if root != n.journal.ContainerdRoot {
			roots = append(roots, root)
		}
	}
	if !hasFreezer() {
		return errors.New("several real nodes need the cgroup v1 freezer hierarchy (/sys/fs/cgroup/freezer) to power a node off")
	}
	if err := n.journal.record(func(j *journal) {
		j.Netns, j.Veths, j.ContainerdRoots = netns, veths, roots
		j.CreatedCgroups = append(j.CreatedCgroups, cgroups...)
	}); err != nil {
		return err
	}
	for _, m := range ms {
		if err := m.setUpNetns(ms); err != nil {
			return fmt.Errorf("setting up node %s: %w", m, err)
		}
		if err := m.createCgroups(); err != nil {
			return fmt.Errorf("setting up node %s: %w", m.name, err)
		}
	}
	return n.RouteServicesAvoiding()
}

// setUpNetns creates the member's namespace and veth, addresses and routes.
func (m *member) setUpNetns(all []*member) error {
	steps := [][]string{
		{"ip", "netns", "add", m.netns},
		{"ip", "link", "add", m.veth, "type", "veth", "peer", "name", memberLink, "netns", m.netns},
		{"ip", "link", "set", m.veth, "master", Bridge, "up"},
		{"ip", "-n", m.netns, "link", "set", "lo", "up"},
		{"ip", "-n", m.netns, "addr", "add", m.ip + "/24", "dev", memberLink},
		{"ip", "-n", m.netns, "link", "set", memberLink, "up"},
		// The host reaches the node's pods through the node: the route goes
		// with the bridge.
		{"ip", "route", "replace", m.podSubnet, "via", m.ip, "dev", Bridge, "src", NodeIP},
	}
	for _, o := range all {
		if o != m {
			steps = append(steps, []string{"ip", "-n", m.netns, "route", "replace", o.podSubnet, "via", o.ip, "dev", memberLink})
		}
	}
	for _, s := range steps {
		if _, err := host("", s[0], s[1:]...); err != nil {
			return err
		}
	}
	// per namespace: gone with it
	for _, s := range []string{"net.ipv4.ip_forward=1", "net.bridge.bridge-nf-call-iptables=1"} {
		if _, err := m.run("", "sysctl", "-qw", s); err != nil {
			return err
		}
	}
	if _, err := m.run(memberGuardRules, "nft", "-f", "-"); err != nil {
		return fmt.Errorf("loading the guard table: %w", err)
	}
	return nil
}

// createCgroups creates the member's cgroup in each hierarchy (the
// kubelet refuses a cgroupRoot that does not exist); a v1 cpuset cgroup
// gets its parent's CPUs and memory nodes, or nothing could join it.
func (m *member) createCgroups() error {
	for _, cg := range m.cgroups() {
		if err := os.Mkdir(cg, 0o755); err != nil && !os.IsExist(err) {
			return fmt.Errorf("creating cgroup %s: %w", cg, err)
		}
		if filepath.Base(filepath.Dir(cg)) != "cpuset" {
			continue
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(filepath.Dir(cg), f))
			if err != nil {
				return fmt.Errorf("reading %s of the cpuset root: %w", f, err)
			}
			if err := os.WriteFile(filepath.Join(cg, f), v, 0o644); err != nil {
				return fmt.Errorf("writing %s of %s: %w", f, cg, err)
			}
		}
	}
	return nil
}

func hasFreezer() bool {
	_, err := os.Stat("/sys/fs/cgroup/freezer/cgroup.procs")
	return err == nil
}

// RouteServicesAvoiding points the host's route for the Service range at
// the first node of several not named in avoid (and not held off by
// HoldServiceRouteOff), so that the host (the API server calling a
// webhook, a test's client dialing a ClusterIP) reaches Services through a
// node whose kube-proxy translates them; that kube-proxy masquerades what
// comes from outside its pods' subnet, so answers return through it. On
// the single node the route goes through the bridge itself, unchanged.
func (n *Node) RouteServicesAvoiding(avoid ...string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.routeServicesLocked(avoid)
}

// routeServicesLocked is RouteServicesAvoiding with n.mu held.
func (n *Node) routeServicesLocked(avoid []string) error {
	if !n.members[0].multi() {
		return nil
	}
	skip := map[string]bool{}
	for _, a := range avoid {
		skip[a] = true
	}
	for name, held := range n.heldOff {
		skip[name] = skip[name] || held > 0
	}
	for _, m := range n.members {
		if skip[m.name] {
			continue
		}
		if _, err := host("", "ip", "route", "replace", realServiceRange, "via", m.ip, "dev", Bridge, "src", NodeIP); err != nil {
			return fmt.Errorf("routing the Service range through %s: %w", m.name, err)
		}
		n.serviceGateway = m.name
		return nil
	}
	return fmt.Errorf("no node left to route the Service range through (avoiding %s)", strings.Join(avoid, ", "))
}
