package realnode

import (
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/test/framework/cluster"
)

// assertContainedAll is assertContained for several nodes: in the host's
// network namespace and in each node's, every socket the cluster's
// processes listen on is bound to loopback or that namespace's node IP;
// no node namespace has a default route; and no guard table (the host's,
// each node's) dropped a packet.
func assertContainedAll(t *testing.T, c *cluster.Cluster, n *Node) {
	t.Helper()
	ours := ourPids(c, n)
	listeners := 0
	check := func(m *member, ip string) {
		out, err := m.run("", "ss", "-Hltunp")
		require.NoError(t, err)
		listeners += checkListeners(t, out, ours, ip)
	}
	check(&member{}, NodeIP) // the host's namespace: etcd, the API server, CoreDNS
	for _, m := range n.members {
		check(m, m.ip) // the kubelet, containerd's stream server, kube-proxy
		routes, err := m.run("", "ip", "route", "show", "default")
		assert.NoError(t, err)
		assert.Empty(t, strings.TrimSpace(routes), "a default route in the namespace of %s", m.name)
		guard, err := m.run("", "nft", "list", "table", "inet", guardTable)
		require.NoError(t, err)
		assert.Equal(t, 3, strings.Count(guard, "counter packets 0 bytes 0"), "the guard table of %s dropped packets:\n%s", m.name, guard)
	}
	assert.GreaterOrEqual(t, listeners, 5+2*len(n.members), "the cluster's listeners not found")
	assertNothingForwarded(t)
}

// ourPids are the cluster's processes: those the journal recorded, and
// those referring to its directory.
func ourPids(c *cluster.Cluster, n *Node) map[int]bool {
	ours := map[int]bool{}
	for _, pid := range n.journal.Pids {
		ours[pid] = true
	}
	for _, pid := range processesReferring(c.Dir + "/") {
		ours[pid] = true
	}
	return ours
}

// checkListeners asserts that each listening socket of ours in ss's
// output (ss -Hltunp) is bound to loopback or ip, and returns how many
// it found.
func checkListeners(t *testing.T, ss string, ours map[int]bool, ip string) int {
	t.Helper()
	pidRE := regexp.MustCompile(`pid=(\d+)`)
	listeners := 0
	for _, line := range strings.Split(ss, "\n") {
		f := strings.Fields(line)
		if len(f) < 7 {
			continue
		}
		for _, match := range pidRE.FindAllStringSubmatch(line, -1) {
			if pid, _ := strconv.Atoi(match[1]); !ours[pid] {
				continue
			}
			listeners++
			addr, _, err := net.SplitHostPort(f[4])
			assert.NoError(t, err)
			addr, _, _ = strings.Cut(addr, "%") // bound to a device: 198.18.0.1%dbk-br0
			assert.Contains(t, []string{"127.0.0.1", ip}, addr, "a listener outside loopback and %s: %s", ip, line)
			break
		}
	}
	return listeners
}

// assertNothingForwarded: the host's guard table dropped nothing
// forwarded off the bridge.
func assertNothingForwarded(t *testing.T) {
	t.Helper()
	guard, err := host("", "nft", "list", "chain", "inet", guardTable, "forward")
	require.NoError(t, err)
	assert.Equal(t, 2, strings.Count(guard, "counter packets 0 bytes 0"), "packets forwarded off the bridge were dropped:\n%s", guard)
}
