package realnode_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/test/framework/cluster"
	"github.com/dbkeeper/dbkeeper/test/framework/faults"
	"github.com/dbkeeper/dbkeeper/test/framework/realnode"
)

// echoServer answers each connection on port 8080 with its node's name.
const echoServer = `use IO::Socket::INET;
my $s = IO::Socket::INET->new(LocalPort => 8080, Listen => 16, ReuseAddr => 1) or die "listen: $!";
while (my $c = $s->accept) { print $c "$ENV{NODE}\n"; close $c }`

// TestRealNodes starts three real nodes and checks: each is Ready with its
// hostname and zone labels; a pod on each reaches a pod on each other by
// IP and through a ClusterIP Service by its DNS name, and has no default
// route; the host reaches pods and Services; nothing listens outside
// loopback and the node IPs, no namespace has a default route and no
// guard table dropped anything. Then the node faults: a powered-off node
// goes NotReady and its pod is out of reach, and powered on it comes back
// with the same pod; a node partitioned from the others is out of their
// pods' reach but not the host's; a node partitioned from the API server
// reaches CoreDNS but not the API server; a drained node is cordoned and
// its pod evicted. After Stop nothing is left.
func TestRealNodes(t *testing.T) {
	realnode.Require(t)
	ctx := context.Background()
	before := realnode.Baseline(t)
	o := realnode.RealNodesOptions(t, 3, "postgres:17")
	started := time.Now()
	c, err := cluster.Start(ctx, o)
	require.NoError(t, err)
	t.Logf("3 nodes Ready in %s", time.Since(started).Round(100*time.Millisecond))
	dir := c.Dir
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			assert.NoError(t, c.Stop())
		}
	})
	rn := o.Node.(*realnode.Node)
	infos := rn.Nodes()
	require.Len(t, infos, 3)
	for i, info := range infos {
		node := &corev1.Node{}
		require.NoError(t, c.Client.Get(ctx, client.ObjectKey{Name: info.Name}, node))
		assert.True(t, realnode.NodeReady(node), "node %s Ready", info.Name)
		assert.Equal(t, fmt.Sprintf("dbk-node-%d", i+1), node.Name)
		assert.Equal(t, node.Name, node.Labels[corev1.LabelHostname])
		assert.Equal(t, []string{"zone-a", "zone-b", "zone-c"}[i], node.Labels[corev1.LabelTopologyZone])
	}

	pods := make([]*corev1.Pod, len(infos))
	for i, info := range infos {
		pods[i] = echo(t, c, i+1, info.Name)
	}
	for i, info := range infos {
		pods[i] = waitRunning(t, c, pods[i])
		_, subnet, err := net.ParseCIDR(info.PodSubnet)
		require.NoError(t, err)
		assert.True(t, subnet.Contains(net.ParseIP(pods[i].Status.PodIP)), "pod IP %s in %s", pods[i].Status.PodIP, info.PodSubnet)
	}
	svcIP := make([]string, len(infos))
	for i := range infos {
		svc := &corev1.Service{}
		require.NoError(t, c.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: pods[i].Name}, svc))
		svcIP[i] = svc.Spec.ClusterIP
	}
	t.Log("each pod reaches each other by IP and through its Service's name")
	for i := range infos {
		out, err := kubectl(c, "exec", pods[i].Name, "--", "bash", "-c",
			`if grep -qE '^\S+\s+00000000\s' /proc/net/route; then echo "a default route"; exit 1; fi; getent hosts echo-1.default.svc.cluster.local echo-2.default.svc.cluster.local echo-3.default.svc.cluster.local`)
		require.NoError(t, err, out)
		for j := range infos {
			assert.Contains(t, out, svcIP[j]+" ", "echo-%d resolves in pod %s", j+1, pods[i].Name)
			if i == j {
				continue
			}
			assert.Equal(t, infos[j].Name, fetch(t, c, pods[i].Name, pods[j].Status.PodIP, "8080"), "%s to pod %s by IP", pods[i].Name, pods[j].Name)
			assert.Equal(t, infos[j].Name, fetch(t, c, pods[i].Name, pods[j].Name+".default.svc.cluster.local", "80"), "%s to Service %s", pods[i].Name, pods[j].Name)
		}
	}
	t.Log("the host reaches each pod and each Service")
	for j := range infos {
		assert.Equal(t, infos[j].Name, dial(pods[j].Status.PodIP, "8080"), "the host to pod %s", pods[j].Name)
		assert.Equal(t, infos[j].Name, dial(svcIP[j], "80"), "the host to Service %s", pods[j].Name)
	}
	realnode.AssertContainedAll(t, c, rn)

	f := faults.New(c.Client).Nodes(rn)
	t.Log("power off dbk-node-1, which the host's Service route went through")
	require.Equal(t, "dbk-node-1", rn.ServiceGateway())
	off := time.Now()
	powerOn, err := f.PowerOff("dbk-node-1")
	require.NoError(t, err)
	assert.Equal(t, "dbk-node-2", rn.ServiceGateway())
	assert.Empty(t, fetch(t, c, pods[1].Name, pods[0].Status.PodIP, "8080"), "the powered-off node's pod answered")
	assert.Equal(t, infos[2].Name, fetch(t, c, pods[1].Name, pods[2].Status.PodIP, "8080"), "the other nodes still reach each other")
	assert.Equal(t, infos[2].Name, dial(svcIP[2], "80"), "the host reaches Services through another node")
	waitNodeReady(t, c, "dbk-node-1", false, 3*time.Minute)
	t.Logf("dbk-node-1 NotReady %s after its power-off", time.Since(off).Round(100*time.Millisecond))
	require.NoError(t, powerOn())
	on := time.Now()
	waitNodeReady(t, c, "dbk-node-1", true, 2*time.Minute)
	t.Logf("dbk-node-1 Ready %s after its power-on", time.Since(on).Round(100*time.Millisecond))
	assert.Equal(t, infos[0].Name, fetch(t, c, pods[1].Name, pods[0].Status.PodIP, "8080"), "the powered-on node's pod answers again")
	again := &corev1.Pod{}
	require.NoError(t, c.Client.Get(ctx, client.ObjectKeyFromObject(pods[0]), again))
	assert.Equal(t, pods[0].UID, again.UID, "the same pod after power-on")

	t.Log("partition dbk-node-2 from the other nodes")
	heal, err := f.PartitionFromNodes("dbk-node-2")
	require.NoError(t, err)
	assert.Empty(t, fetch(t, c, pods[2].Name, pods[1].Status.PodIP, "8080"), "a partitioned node's pod answered another node's")
	assert.Empty(t, fetch(t, c, pods[1].Name, pods[0].Status.PodIP, "8080"), "a partitioned node's pod reached another node's")
	assert.Equal(t, infos[1].Name, dial(pods[1].Status.PodIP, "8080"), "the host still reaches the partitioned node's pod")
	assert.Equal(t, infos[0].Name, dial(svcIP[0], "80"), "the host reaches Services through another node")
	require.NoError(t, heal())
	assert.Equal(t, infos[1].Name, fetch(t, c, pods[2].Name, pods[1].Status.PodIP, "8080"), "healed")

	t.Log("partition dbk-node-3 from the API server")
	api, err := url(c)
	require.NoError(t, err)
	heal, err = f.PartitionFromAPIServer(ctx, "dbk-node-3")
	require.NoError(t, err)
	netns := infos[2].Netns
	out, err := inNetns(netns, "bash", "-c", fmt.Sprintf("timeout 3 bash -c '</dev/tcp/%s/%s' && echo reached", api.ip, api.port))
	assert.NotContains(t, out, "reached", "the partitioned node reached the API server: %v", err)
	out, err = inNetns(netns, "bash", "-c", "timeout 3 bash -c '</dev/tcp/"+realnode.NodeIP+"/53' && echo reached")
	assert.Contains(t, out, "reached", "the partitioned node reaches CoreDNS: %v", err)
	_, err = kubectl(c, "exec", pods[2].Name, "--", "true")
	assert.Error(t, err, "the API server reached the partitioned node's kubelet")
	require.NoError(t, heal())
	out, err = kubectl(c, "exec", pods[2].Name, "--", "true")
	assert.NoError(t, err, out)

	t.Log("drain dbk-node-3")
	drainCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	uncordon, err := f.Drain(drainCtx, "dbk-node-3")
	require.NoError(t, err)
	node := &corev1.Node{}
	require.NoError(t, c.Client.Get(ctx, client.ObjectKey{Name: "dbk-node-3"}, node))
	assert.True(t, node.Spec.Unschedulable, "drained node cordoned")
	assert.True(t, apierrors.IsNotFound(c.Client.Get(ctx, client.ObjectKeyFromObject(pods[2]), &corev1.Pod{})), "the drained node's pod evicted")
	require.NoError(t, uncordon())
	require.NoError(t, c.Client.Get(ctx, client.ObjectKey{Name: "dbk-node-3"}, node))
	assert.False(t, node.Spec.Unschedulable, "uncordoned")

	stopped = true
	require.NoError(t, c.Stop())
	realnode.AssertNothingLeft(t, before, dir)
}

// echo creates pod echo-<i> on node and its Service echo-<i> (port 80 to
// the pod's 8080).
func echo(t *testing.T, c *cluster.Cluster, i int, node string) *corev1.Pod {
	t.Helper()
	name := fmt.Sprintf("echo-%d", i)
	labels := map[string]string{"app": name}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: "echo", Image: c.Images["postgres:17"], ImagePullPolicy: corev1.PullNever,
				Command: []string{"perl", "-e", echoServer},
				Env: []corev1.EnvVar{{Name: "NODE", ValueFrom: &corev1.EnvVarSource{
					FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"},
				}}},
			}},
		},
	}
	require.NoError(t, c.Client.Create(context.Background(), pod))
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{
			Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP,
		}}},
	}
	require.NoError(t, c.Client.Create(context.Background(), svc))
	return pod
}

// waitRunning waits for the pod to be Running, and returns it.
func waitRunning(t *testing.T, c *cluster.Cluster, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	got := &corev1.Pod{}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), got))
		assert.Equal(ct, corev1.PodRunning, got.Status.Phase)
	}, 2*time.Minute, 200*time.Millisecond, "pod %s not Running", pod.Name)
	return got
}

// waitNodeReady waits for node's Ready condition to be ready.
func waitNodeReady(t *testing.T, c *cluster.Cluster, name string, ready bool, timeout time.Duration) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		node := &corev1.Node{}
		require.NoError(ct, c.Client.Get(context.Background(), client.ObjectKey{Name: name}, node))
		assert.Equal(ct, ready, realnode.NodeReady(node))
	}, timeout, 250*time.Millisecond, "node %s Ready=%t", name, ready)
}

// fetch is what pod reads from host:port within 4 s: the answering
// node's name, or "" when it could not connect.
func fetch(t *testing.T, c *cluster.Cluster, pod, host, port string) string {
	t.Helper()
	out, err := kubectl(c, "exec", pod, "--", "timeout", "4", "bash", "-c", `exec 3<>/dev/tcp/$0/$1 && head -n1 <&3`, host, port)
	if err != nil {
		t.Logf("%s to %s:%s: %v: %s", pod, host, port, err, out)
		return ""
	}
	return strings.TrimSpace(out)
}

// dial is what the host reads from host:port within 4 s, or "".
func dial(host, port string) string {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(host, port), 4*time.Second)
	if err != nil {
		return ""
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(4 * time.Second))
	line, _ := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(line)
}

// kubectl runs the cluster's kubectl in namespace default.
func kubectl(c *cluster.Cluster, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(c.Bin, "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig, "-n", "default", "--request-timeout=15s"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// inNetns runs a command in the network namespace netns (a file).
func inNetns(netns string, args ...string) (string, error) {
	out, err := exec.Command("nsenter", append([]string{"--net=" + netns, "--"}, args...)...).CombinedOutput()
	return string(out), err
}

type endpoint struct{ ip, port string }

// url is the API server's address.
func url(c *cluster.Cluster) (endpoint, error) {
	host := strings.TrimPrefix(c.Config.Host, "https://")
	ip, port, err := net.SplitHostPort(host)
	return endpoint{ip, port}, err
}
