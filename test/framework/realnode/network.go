package realnode

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// The real node's addresses: RFC 2544 benchmark space (198.18.0.0/15), which
// no real network here uses. Everything else listens on 127.0.0.1.
const (
	// Bridge is the one network interface the real node creates.
	Bridge = "dbk-br0"
	// NodeIP is the bridge's address: the kubelet, CoreDNS and the API
	// server listen on it, and it is the only host address pods reach.
	NodeIP = "198.18.0.1"
	// realServiceRange is the Services' range of the real node's cluster.
	realServiceRange = "198.19.0.0/16"
	// APIServiceIP is the ClusterIP of the kubernetes Service.
	APIServiceIP = "198.19.0.1"
	// DNSServiceIP is the ClusterIP of kube-system/kube-dns.
	DNSServiceIP = "198.19.0.10"
	podSubnet    = "198.18.0.0/24"
	podRangeFrom = "198.18.0.10"
	podRangeTo   = "198.18.0.250"
	// containedRange is the only range pods have a route to.
	containedRange = "198.18.0.0/15"
	clusterCIDR    = "198.18.0.0/16"
	guardTable     = "dbkeeper_guard"
	// FaultTablePrefix starts the name of every inet nftables table a
	// test adds to inject a network fault (test/framework/faults):
	// teardown deletes them, so that a failed or interrupted test leaves
	// none behind.
	FaultTablePrefix = "dbkeeper_fault"
	clusterDomain    = "cluster.local"
)

// savedSysctls are the kernel settings the node's components may change
// (the bridge's netfilter hook here; the kubelet's kernel tunables; the
// forwarding switches kube-proxy checks): saved before, restored after.
var savedSysctls = []string{
	"net.ipv4.ip_forward",
	"net.ipv4.conf.all.forwarding",
	"net.ipv4.conf.all.route_localnet",
	"net.ipv6.conf.all.forwarding",
	"net.bridge.bridge-nf-call-iptables",
	"net.bridge.bridge-nf-call-ip6tables",
	"vm.overcommit_memory",
	"vm.panic_on_oom",
	"kernel.panic",
	"kernel.panic_on_oops",
	"kernel.keys.root_maxkeys",
	"kernel.keys.root_maxbytes",
}

// hostPaths are paths containerd, runc, the CNI plugins and the kubelet
// create outside the cluster directory (the kubelet's device-plugin socket
// has a fixed path under /var/lib/kubelet); those that did not exist before
// are removed at teardown.
var hostPaths = []string{"/run/containerd", "/run/nri", "/var/lib/cni", "/run/netns", "/var/log/containers", "/var/log/pods", "/var/lib/kubelet"}

// host runs a host command (ip, nft, sysctl) and returns its output.
func host(stdin string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// readSysctls returns the current values of savedSysctls that exist.
func readSysctls() map[string]string {
	values := map[string]string{}
	for _, k := range savedSysctls {
		if v, err := readSysctl(k); err == nil {
			values[k] = v
		}
	}
	return values
}

// readSysctl returns the value of one kernel setting.
func readSysctl(key string) (string, error) {
	data, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(key, ".", "/"))
	return strings.TrimSpace(string(data)), err
}

// nftTables lists the nftables tables as "family name".
func nftTables() ([]string, error) {
	out, err := host("", "nft", "list", "tables")
	if err != nil {
		return nil, err
	}
	var tables []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "table" {
			tables = append(tables, f[1]+" "+f[2])
		}
	}
	return tables, nil
}

// guardRules is the guard table: nothing is forwarded between the bridge
// and another interface, and pods reach no host address but the node IP.
const guardRules = `table inet ` + guardTable + ` {
	chain forward {
		type filter hook forward priority -10; policy accept;
		iifname "` + Bridge + `" oifname != "` + Bridge + `" counter drop comment "pods reach only the bridge"
		oifname "` + Bridge + `" iifname != "` + Bridge + `" counter drop
	}
	chain input {
		type filter hook input priority -10; policy accept;
		iifname "` + Bridge + `" ip daddr != ` + NodeIP + ` counter drop comment "pods reach only the node IP on the host"
		iifname "` + Bridge + `" meta nfproto ipv6 counter drop
	}
}
`

// setUpNetwork records the host's state in the journal, then creates the
// bridge with the node IP, the Service route through it, forwarding on the
// bridge only, and the guard table.
func setUpNetwork(j *journal) error {
	// Another user of the range (the shared bash reference's rn-br0, say)
	// would fight over the addresses: refuse before changing anything.
	out, err := host("", "ip", "-o", "addr", "show", "to", containedRange)
	if err != nil {
		return fmt.Errorf("listing the host's addresses: %w", err)
	}
	if strings.TrimSpace(out) != "" {
		return fmt.Errorf("an interface already has an address in %s, which the real node needs for itself "+
			"(the bash reference's rn-br0? its down.sh removes it):\n%s", containedRange, out)
	}
	before, err := nftTables()
	if err != nil {
		return fmt.Errorf("listing nftables tables: %w", err)
	}
	var created []string
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); os.IsNotExist(err) {
			created = append(created, p)
		}
	}
	var cgroups []string
	for _, h := range cgroupHierarchies() {
		for _, name := range []string{"kubepods", "k8s.io"} {
			if _, err := os.Stat(h + "/" + name); os.IsNotExist(err) {
				cgroups = append(cgroups, h+"/"+name)
			}
		}
	}
	if err := j.record(func(j *journal) {
		j.Sysctls, j.NftTablesBefore, j.CreatedPaths, j.CreatedCgroups = readSysctls(), before, created, cgroups
		j.Bridge = true
	}); err != nil {
		return err
	}
	steps := [][]string{
		{"ip", "link", "add", Bridge, "type", "bridge"},
		{"ip", "addr", "add", NodeIP + "/24", "dev", Bridge},
		{"ip", "link", "set", Bridge, "up"},
		// The API server reaches ClusterIPs (webhooks served by pods) through
		// the bridge, from the node IP; the route goes with the bridge.
		{"ip", "route", "replace", realServiceRange, "dev", Bridge, "src", NodeIP},
		{"sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1"},
		// Forwarding is decided by the input interface: on for the bridge
		// only, so pod -> Service -> pod works and nothing from eth0 is routed.
		{"sysctl", "-qw", "net.ipv4.conf." + Bridge + ".forwarding=1"},
	}
	for _, s := range steps {
		if _, err := host("", s[0], s[1:]...); err != nil {
			return fmt.Errorf("setting up the bridge: %w", err)
		}
	}
	if err := j.record(func(j *journal) { j.Guard = true }); err != nil {
		return err
	}
	if _, err := host(guardRules, "nft", "-f", "-"); err != nil {
		return fmt.Errorf("loading the guard table: %w", err)
	}
	return nil
}

// cgroupHierarchies returns the mounted cgroup hierarchies (v1 controllers
// and the unified one).
func cgroupHierarchies() []string {
	entries, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return nil
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, "/sys/fs/cgroup/"+e.Name())
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		dirs = append(dirs, "/sys/fs/cgroup")
	}
	return dirs
}
