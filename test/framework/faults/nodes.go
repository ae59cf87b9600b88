package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/test/framework/realnode"
)

// NodeFaults injects faults into whole nodes of a real-node cluster of
// several nodes (realnode.Options.Nodes): power off and on, partitions,
// cordon and drain. Its network faults are nftables tables in the node's
// network namespace, named after realnode.FaultTablePrefix, which go with
// the namespace at teardown; a node left powered off is thawed and its
// link deleted by teardown too.
type NodeFaults struct {
	i     *Injector
	nodes *realnode.Node
}

// Nodes returns the node faults of the cluster whose real node is nodes.
func (i *Injector) Nodes(nodes *realnode.Node) *NodeFaults {
	return &NodeFaults{i: i, nodes: nodes}
}

// info describes a node of several (not the single node, whose faults
// would be the host's).
func (f *NodeFaults) info(name string) (realnode.NodeInfo, error) {
	info, err := f.nodes.NodeInfo(name)
	if err != nil {
		return info, err
	}
	if info.Netns == "" {
		return info, fmt.Errorf("node %s is the single real node: node faults need realnode.Options.Nodes > 1", name)
	}
	return info, nil
}

// PowerOff turns node name off as far as the rest of the cluster can
// tell, until the returned Undo powers it on: every process of the node
// (kubelet, containerd and its shims, kube-proxy, every container of its
// pods) is frozen at once (the v1 freezer cgroup that holds them all), and
// its link to the bridge is set down, so that nothing reaches it and it
// sends nothing; no connection is closed, as with a machine whose power
// was cut. The host's route to Services moves to another node meanwhile.
// Powered on, the processes resume where they were (the pods' state is
// kept) and the link comes back up.
func (f *NodeFaults) PowerOff(name string) (Undo, error) {
	info, err := f.info(name)
	if err != nil {
		return nil, err
	}
	release, err := f.nodes.HoldServiceRouteOff(name)
	if err != nil {
		return nil, err
	}
	on := once(func() error {
		var errs []error
		if out, err := ip("link", "set", info.Link, "up"); err != nil {
			errs = append(errs, fmt.Errorf("setting %s up: %w: %s", info.Link, err, out))
		}
		errs = append(errs, setFreezer(info.Freezer, "THAWED"), release())
		return errors.Join(errs...)
	})
	if err := setFreezer(info.Freezer, "FROZEN"); err != nil {
		return nil, errors.Join(err, on())
	}
	if out, err := ip("link", "set", info.Link, "down"); err != nil {
		return nil, errors.Join(fmt.Errorf("setting %s down: %w: %s", info.Link, err, out), on())
	}
	return on, nil
}

// setFreezer writes state (FROZEN or THAWED) to a v1 freezer cgroup and
// waits (up to 10 s) until it holds.
func setFreezer(cg, state string) error {
	file := filepath.Join(cg, "freezer.state")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := os.WriteFile(file, []byte(state), 0o644); err != nil {
			return fmt.Errorf("writing %s to %s: %w", state, file, err)
		}
		now, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("reading %s: %w", file, err)
		}
		if strings.TrimSpace(string(now)) == state {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is %s, not %s, after 10 s", cg, strings.TrimSpace(string(now)), state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// PartitionFromNodes cuts node name off from the other nodes, and only
// from them, until the returned Undo: a table in its network namespace
// drops every packet between it (itself and its pods) and the other
// nodes' IPs and pods' subnets, both ways, forwarded or not. The API
// server, CoreDNS and the host's processes (the operator, a test's
// clients) still reach it, and it them. The host's route to Services
// moves off the node meanwhile (through it, they would reach no other
// node's pod).
func (f *NodeFaults) PartitionFromNodes(name string) (Undo, error) {
	info, err := f.info(name)
	if err != nil {
		return nil, err
	}
	var peers []string
	for _, o := range f.nodes.Nodes() {
		if o.Name != name {
			peers = append(peers, o.IP, o.PodSubnet)
		}
	}
	table := realnode.FaultTablePrefix + "_partition_nodes"
	rules := fmt.Sprintf(`table inet %[1]s {
	set peers {
		type ipv4_addr; flags interval;
		elements = { %[2]s }
	}
	chain input {
		type filter hook input priority -20; policy accept;
		ip saddr @peers counter drop
	}
	chain output {
		type filter hook output priority -20; policy accept;
		ip daddr @peers counter drop
	}
	chain forward {
		type filter hook forward priority -20; policy accept;
		ip saddr @peers counter drop
		ip daddr @peers counter drop
	}
}
`, table, strings.Join(peers, ", "))
	return f.loadTable(info, table, rules, true)
}

// PartitionFromAPIServer cuts node name off from the API server, and only
// from it, until the returned Undo: a table in its network namespace
// drops the kubelet's and kube-proxy's packets to the API server's
// address and port and their answers, the same for its pods (which reach
// the kubernetes Service's endpoint after kube-proxy's translation), and
// the API server's calls to the kubelet (logs, exec). The other nodes,
// CoreDNS and the host's processes still reach it. The node goes
// NotReady once the node controller's grace period passes, while its
// pods keep running and serving.
func (f *NodeFaults) PartitionFromAPIServer(ctx context.Context, name string) (Undo, error) {
	info, err := f.info(name)
	if err != nil {
		return nil, err
	}
	addr, port, err := f.i.apiServerEndpoint(ctx)
	if err != nil {
		return nil, err
	}
	table := realnode.FaultTablePrefix + "_partition_api"
	rules := fmt.Sprintf(`table inet %[1]s {
	chain input {
		type filter hook input priority -20; policy accept;
		ip saddr %[2]s tcp sport %[3]d counter drop comment "the API server's answers"
		ip saddr %[2]s tcp dport 10250 counter drop comment "the API server's calls to the kubelet"
	}
	chain output {
		type filter hook output priority -20; policy accept;
		ip daddr %[2]s tcp dport %[3]d counter drop comment "the kubelet and kube-proxy to the API server"
		ip daddr %[2]s tcp sport 10250 counter drop
	}
	chain forward {
		type filter hook forward priority -20; policy accept;
		ip daddr %[2]s tcp dport %[3]d counter drop comment "its pods to the API server"
		ip saddr %[2]s tcp sport %[3]d counter drop
	}
}
`, table, addr, port)
	return f.loadTable(info, table, rules, false)
}

// Isolate cuts node name off from the other nodes and from the API
// server (PartitionFromNodes and PartitionFromAPIServer) until the
// returned Undo, which lifts both: the node runs on, and only the host's
// processes (the operator, a test's clients) still reach it.
func (f *NodeFaults) Isolate(ctx context.Context, name string) (Undo, error) {
	fromNodes, err := f.PartitionFromNodes(name)
	if err != nil {
		return nil, err
	}
	fromAPI, err := f.PartitionFromAPIServer(ctx, name)
	if err != nil {
		return nil, errors.Join(err, fromNodes())
	}
	return once(func() error { return errors.Join(fromAPI(), fromNodes()) }), nil
}

// loadTable loads a fault table into the node's network namespace, holding
// the host's Service route off the node when moveServices, and returns
// its Undo, which deletes the table.
func (f *NodeFaults) loadTable(info realnode.NodeInfo, table, rules string, moveServices bool) (Undo, error) {
	release := func() error { return nil }
	if moveServices {
		r, err := f.nodes.HoldServiceRouteOff(info.Name)
		if err != nil {
			return nil, err
		}
		release = r
	}
	if out, err := nftIn(info.Netns, rules, "-f", "-"); err != nil {
		return nil, errors.Join(fmt.Errorf("loading table %s into the netns of %s: %w: %s", table, info.Name, err, out), release())
	}
	return once(func() error {
		var errs []error
		if out, err := nftIn(info.Netns, "", "delete", "table", "inet", table); err != nil {
			errs = append(errs, fmt.Errorf("deleting table %s of %s: %w: %s", table, info.Name, err, out))
		}
		return errors.Join(append(errs, release())...)
	}), nil
}

// nftIn runs nft in the network namespace netns (a file), with stdin.
func nftIn(netns, stdin string, args ...string) (string, error) {
	return run(stdin, "nsenter", append([]string{"--net=" + netns, "--", "nft"}, args...)...)
}

// ip runs ip on the host.
func ip(args ...string) (string, error) { return run("", "ip", args...) }

// run runs a host command with stdin and returns its combined output.
func run(stdin, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}
