package faults

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/test/framework/realnode"
)

// Cut is a pod cut off from the API server by an nftables table of its
// own.
type Cut struct {
	// Table is the inet table's name (realnode.FaultTablePrefix...).
	Table string
	// PodIP is the pod cut off; APIServer the address and port its
	// packets to the API server are sent to after kube-proxy's DNAT.
	PodIP, APIServer string
}

// CutFromAPIServer drops every packet between the pod with podIP and the
// API server, as a partitioned node would see it, until Undo. A pod
// reaches the API server through the kubernetes Service's ClusterIP,
// which kube-proxy DNATs (prerouting) to the API server's endpoint, an
// address of the host: the table drops, after that DNAT, the pod's packets
// to the endpoint on the host's input hook, and the host's answers to the
// pod on the output hook. Its counters say how many it dropped (Dropped).
// Nothing else of the pod's traffic changes: its clients, its standbys,
// the operator's calls to its agent still pass.
func (i *Injector) CutFromAPIServer(ctx context.Context, podIP string) (*Cut, Undo, error) {
	if net.ParseIP(podIP).To4() == nil {
		return nil, nil, fmt.Errorf("pod IP %q is not an IPv4 address", podIP)
	}
	ip, port, err := i.apiServerEndpoint(ctx)
	if err != nil {
		return nil, nil, err
	}
	c := &Cut{
		Table:     realnode.FaultTablePrefix + "_cut_" + strings.ReplaceAll(podIP, ".", "_"),
		PodIP:     podIP,
		APIServer: net.JoinHostPort(ip, strconv.Itoa(port)),
	}
	rules := fmt.Sprintf(`table inet %[1]s {
	chain input {
		type filter hook input priority -20; policy accept;
		ip saddr %[2]s ip daddr %[3]s tcp dport %[4]d counter drop comment "pod to the API server"
	}
	chain output {
		type filter hook output priority -20; policy accept;
		ip daddr %[2]s ip saddr %[3]s tcp sport %[4]d counter drop comment "the API server to the pod"
	}
}
`, c.Table, podIP, ip, port)
	if out, err := nft(rules, "-f", "-"); err != nil {
		return nil, nil, fmt.Errorf("loading table %s: %w: %s", c.Table, err, out)
	}
	return c, once(func() error {
		if out, err := nft("", "delete", "table", "inet", c.Table); err != nil {
			return fmt.Errorf("deleting table %s: %w: %s", c.Table, err, out)
		}
		return nil
	}), nil
}

// apiServerEndpoint is the address and port the kubernetes Service sends
// pods to: its EndpointSlice, which kube-proxy DNATs to.
func (i *Injector) apiServerEndpoint(ctx context.Context) (string, int, error) {
	slices := &discoveryv1.EndpointSliceList{}
	if err := i.client.List(ctx, slices, client.InNamespace("default"),
		client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"}); err != nil {
		return "", 0, fmt.Errorf("listing the kubernetes Service's EndpointSlices: %w", err)
	}
	for _, s := range slices.Items {
		if s.AddressType != discoveryv1.AddressTypeIPv4 || len(s.Ports) == 0 || s.Ports[0].Port == nil {
			continue
		}
		for _, e := range s.Endpoints {
			if len(e.Addresses) > 0 {
				return e.Addresses[0], int(*s.Ports[0].Port), nil
			}
		}
	}
	return "", 0, fmt.Errorf("the kubernetes Service has no IPv4 endpoint")
}

var counterRE = regexp.MustCompile(`counter packets (\d+)`)

// Dropped is how many packets the cut dropped so far, both ways.
func (c *Cut) Dropped() (int, error) {
	out, err := nft("", "list", "table", "inet", c.Table)
	if err != nil {
		return 0, fmt.Errorf("listing table %s: %w: %s", c.Table, err, out)
	}
	n := 0
	for _, m := range counterRE.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n, nil
}

// nft runs nft with stdin.
func nft(stdin string, args ...string) (string, error) {
	cmd := exec.Command("nft", args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// PauseAPIServer stops (SIGSTOP) the cluster's kube-apiserver, a child of
// this test process (envtest starts it), until the returned Undo continues
// it (SIGCONT): every client, the kubelet, the operator and the agents
// alike, sees an API server that accepts connections and never answers,
// as during a control-plane upgrade or an etcd stall. Nothing else
// changes. A test killed meanwhile leaves it stopped only until the
// cluster's teardown, which kills it.
func (i *Injector) PauseAPIServer() (Undo, error) {
	var pids []int
	for _, pid := range Descendants(os.Getpid()) {
		if comm(pid) == "kube-apiserver" {
			pids = append(pids, pid)
		}
	}
	if len(pids) != 1 {
		return nil, fmt.Errorf("found %d kube-apiserver processes under this test process (pid %d), want 1: %v", len(pids), os.Getpid(), pids)
	}
	pid := pids[0]
	if err := kill(pid, syscall.SIGSTOP); err != nil {
		return nil, err
	}
	resume := once(func() error {
		if err := kill(pid, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
			return err
		}
		return nil
	})
	if err := waitStopped([]int{pid}); err != nil {
		return nil, errors.Join(err, resume())
	}
	return resume, nil
}
