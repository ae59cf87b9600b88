package realnode

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/test/framework/cluster"
)

// TestMain undoes this process's real node when the tests are interrupted
// (Ctrl-C, a timeout's SIGTERM): its components die with the process, but
// the host changes and envtest's etcd and API server would wait for the
// next Start.
func TestMain(m *testing.M) {
	// the cluster's volume provisioner logs through controller-runtime
	ctrl.SetLogger(logr.Discard())
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	go func() {
		<-ctx.Done() // only a signal: os.Exit skips the deferred cancel
		if j, err := readJournal(); err == nil && j != nil && j.Owner == os.Getpid() {
			_ = undo(j, func(s string) { fmt.Fprintln(os.Stderr, "interrupted: "+s) })
		}
		os.Exit(1)
	}()
	os.Exit(m.Run())
}

// realOptions are the options of the tests' real nodes, with the pause
// image and images: they wait for each other (and for other packages' real
// nodes) instead of failing.
func realOptions(t *testing.T, images ...string) cluster.Options {
	return realNodesOptions(t, 1, images...)
}

// realNodesOptions are realOptions with nodes nodes.
func realNodesOptions(t *testing.T, nodes int, images ...string) cluster.Options {
	node := New(Options{LockWait: 10 * time.Minute, Images: append([]string{cluster.ImagePause}, images...), Nodes: nodes})
	// The node's tests use no Database: the CRD would only slow them down
	// (and tie them to the API's state of the day).
	return cluster.Options{Progress: testWriter{t}, Node: node, WithoutCRDs: true}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// hostState is what a real node may change on the host.
type hostState struct {
	nftTables []string
	sysctls   map[string]string
	cgroups   []string
	paths     []string
}

// baseline returns the host's state with no real node on it: it holds the
// machine's node lock (so no other package's node runs), after undoing what
// a dead node left (a crashed earlier run), as every Start does. Without
// that, the dead node's changes are in the baseline and its undoing by the
// next Start reads as a difference.
func baseline(t *testing.T) hostState {
	t.Helper()
	var s hostState
	holdingNodeLock(t, func(say func(string)) {
		require.NoError(t, cleanupDead(say))
		s = snapshotHost(t)
	})
	return s
}

// holdingNodeLock runs f holding the machine's node lock.
func holdingNodeLock(t *testing.T, f func(say func(string))) {
	t.Helper()
	say := func(s string) { t.Log("cluster: " + s) }
	l, err := acquireLock(10*time.Minute, say)
	require.NoError(t, err)
	defer l.release()
	f(say)
}

func snapshotHost(t *testing.T) hostState {
	t.Helper()
	tables, err := nftTables()
	require.NoError(t, err)
	cgroups, err := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	require.NoError(t, err)
	nodeCgroups, err := filepath.Glob("/sys/fs/cgroup/*/" + NodeNamePrefix + "*")
	require.NoError(t, err)
	cgroups = append(cgroups, nodeCgroups...)
	var paths []string
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); err == nil {
			paths = append(paths, p)
		}
	}
	return hostState{nftTables: tables, sysctls: readSysctls(), cgroups: cgroups, paths: paths}
}

// assertNothingLeft checks that the host is as before and that nothing of
// the node whose directory was dir is left.
func assertNothingLeft(t *testing.T, before hostState, dir string) {
	t.Helper()
	// Under the lock: another package's node may start as soon as ours
	// stops. Nothing is undone first: what is left is the finding.
	holdingNodeLock(t, func(func(string)) { assertNothingLeftLocked(t, before, dir) })
}

func assertNothingLeftLocked(t *testing.T, before hostState, dir string) {
	t.Helper()
	assert.NoFileExists(t, "/sys/class/net/"+Bridge, "bridge left")
	routes, err := host("", "ip", "route", "show", realServiceRange)
	assert.NoError(t, err)
	assert.Empty(t, strings.TrimSpace(routes), "Service route left")
	routes, err = host("", "ip", "route", "show", "root", containedRange)
	assert.NoError(t, err)
	assert.NotContains(t, routes, "198.18.", "a route into the contained range left")
	netns, _ := filepath.Glob("/run/netns/dbk-n*")
	assert.Empty(t, netns, "network namespaces left")
	links, _ := filepath.Glob("/sys/class/net/dbk-*")
	assert.Empty(t, links, "links left")
	after := snapshotHost(t)
	assert.ElementsMatch(t, before.nftTables, after.nftTables, "nftables tables differ")
	assert.Equal(t, before.sysctls, after.sysctls, "sysctls differ")
	assert.ElementsMatch(t, before.cgroups, after.cgroups, "kubepods cgroups differ")
	assert.ElementsMatch(t, before.paths, after.paths, "host paths differ")
	root, err := containerdRoot()
	require.NoError(t, err)
	assert.Empty(t, mountsUnder(dir, root, "/run/containerd", "/run/netns"), "mounts left")
	var procs []string
	for _, pid := range processesReferring(dir + "/") {
		procs = append(procs, fmt.Sprintf("%d %s", pid, cmdline(pid)))
	}
	assert.Empty(t, procs, "processes referring to %s left", dir)
	assert.NoDirExists(t, dir, "cluster directory left")
	assert.NoDirExists(t, journalDir, "journal left")
}

// assertContained checks, on a running node, that every socket its
// processes listen on in the host's network namespace is bound to loopback
// or the node IP, and that the guard table forwarded nothing off the
// bridge.
func assertContained(t *testing.T, c *cluster.Cluster, n *Node) {
	t.Helper()
	out, err := host("", "ss", "-Hltunp")
	require.NoError(t, err)
	listeners := checkListeners(t, out, ourPids(c, n), NodeIP)
	assert.GreaterOrEqual(t, listeners, 5, "the node's listeners not found (apiserver, etcd, kubelet, CoreDNS, kube-proxy):\n%s", out)
	assertNothingForwarded(t)
}

// sleeper is a pod of the pause image: it runs until deleted.
func sleeper(c *cluster.Cluster) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "sleeper"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "pause", Image: c.Images[cluster.ImagePause], ImagePullPolicy: corev1.PullNever,
		}}},
	}
}

// waitRunning waits for the pod to run with an address from the pods'
// range, and returns it.
func waitRunning(t *testing.T, c *cluster.Cluster, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	got := &corev1.Pod{}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), got))
		assert.Equal(ct, corev1.PodRunning, got.Status.Phase)
	}, 2*time.Minute, 200*time.Millisecond, "pod not Running; kubelet log:\n%s", tailLog(c, "kubelet"))
	subnet := ""
	for _, m := range members(MaxNodes) {
		if m.name == got.Spec.NodeName {
			subnet = m.podSubnet
		}
	}
	if got.Spec.NodeName == NodeName {
		subnet = podSubnet
	}
	_, pods, err := net.ParseCIDR(subnet)
	require.NoError(t, err, "node %s", got.Spec.NodeName)
	assert.True(t, pods.Contains(net.ParseIP(got.Status.PodIP)), "pod IP %s not in the pods' range %s of %s", got.Status.PodIP, subnet, got.Spec.NodeName)
	return got
}

func tailLog(c *cluster.Cluster, name string) string {
	if c.NodeName != NodeName && !strings.Contains(name, "-") {
		name += "-1" // the first of several nodes
	}
	return tail(c.Log(name), 30)
}

// TestRealNode starts a real node, runs a pod on it, reads its log through
// the API server (the kubelet's client certificate), stops, and checks that
// nothing is left on the host.
func TestRealNode(t *testing.T) {
	Require(t)
	ctx := context.Background()
	before := baseline(t)
	started := time.Now()
	o := realOptions(t)
	c, err := cluster.Start(ctx, o)
	require.NoError(t, err)
	t.Logf("node Ready in %s", time.Since(started).Round(100*time.Millisecond))
	dir := c.Dir
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			assert.NoError(t, c.Stop())
		}
	})
	assert.Equal(t, cluster.RealNode, c.Node)
	assert.Equal(t, NodeName, c.NodeName)

	pod := sleeper(c)
	require.NoError(t, c.Client.Create(ctx, pod))
	waitRunning(t, c, pod)
	// Forwarding is on for the bridge only, pods running or not.
	assert.Equal(t, before.sysctls["net.ipv4.ip_forward"], readSysctls()["net.ipv4.ip_forward"], "global IPv4 forwarding changed")
	fwd, err := readSysctl("net.ipv4.conf." + Bridge + ".forwarding")
	assert.NoError(t, err)
	assert.Equal(t, "1", fwd, "forwarding on the bridge")
	assertContained(t, c, o.Node.(*Node))
	cs, err := kubernetes.NewForConfig(c.Config)
	require.NoError(t, err)
	_, err = cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	assert.NoError(t, err, "kubectl logs through the API server")

	// A second real node waits for the lock, then refuses.
	_, err = cluster.Start(ctx, cluster.Options{Node: New(Options{LockWait: 300 * time.Millisecond})})
	assert.ErrorContains(t, err, fmt.Sprintf("pid %d", os.Getpid()))

	stopped = true
	require.NoError(t, c.Stop())
	assertNothingLeft(t, before, dir)
}

// crashChildEnv makes the test binary run TestRealNodeCrashChild for
// TestRealNodeCrash; crashNodesEnv says how many nodes it starts.
const (
	crashChildEnv = "DBKEEPER_REALNODE_CRASH_CHILD"
	crashNodesEnv = "DBKEEPER_REALNODE_CRASH_NODES"
)

// crashChild starts a real node with a running pod in a child process (the
// test binary running TestRealNodeCrashChild), kills it with SIGKILL, and
// returns the dead node's directory.
func crashChild(t *testing.T) string { return crashChildOf(t, 1) }

// crashChildOf is crashChild with nodes nodes.
func crashChildOf(t *testing.T, nodes int) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRealNodeCrashChild$", "-test.v")
	cmd.Env = append(os.Environ(), crashChildEnv+"=1", crashNodesEnv+"="+strconv.Itoa(nodes))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	dir := ""
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		t.Log("child: " + line)
		if d, ok := strings.CutPrefix(line, "RUNNING "); ok {
			dir = d
			break
		}
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	go func() { _, _ = io.Copy(io.Discard, out) }()
	_ = cmd.Wait()
	require.NotEmpty(t, dir, "the child did not report a running pod")
	j, err := readJournal()
	require.NoError(t, err)
	require.NotNil(t, j, "the killed node left no journal")
	assert.Equal(t, dir, j.Dir)
	assert.NotEmpty(t, processesReferring(dir+"/"), "nothing of the killed node is left to clean: the test proves nothing")
	return dir
}

// TestRealNodeCrash kills a real node's owner once a pod runs, and checks
// that Cleanup (make node-down) leaves nothing.
func TestRealNodeCrash(t *testing.T) {
	Require(t)
	before := baseline(t)
	dir := crashChild(t)
	require.NoError(t, Cleanup())
	assertNothingLeft(t, before, dir)
}

// TestRealNodeCrashThenStart kills a real node's owner once a pod runs, and
// checks that the next Start cleans up after it, runs a pod, and that its
// Stop leaves nothing of either.
func TestRealNodeCrashThenStart(t *testing.T) {
	Require(t)
	before := baseline(t)
	dead := crashChild(t)
	c, err := cluster.Start(context.Background(), realOptions(t))
	require.NoError(t, err)
	assert.NoDirExists(t, dead, "Start left the dead node's directory")
	dir := c.Dir
	pod := sleeper(c)
	require.NoError(t, c.Client.Create(context.Background(), pod))
	waitRunning(t, c, pod)
	require.NoError(t, c.Stop())
	assertNothingLeft(t, before, dir)
}

// TestRealNodesCrash kills the owner of three real nodes once a pod runs
// and one node is powered off (frozen, its link down), and checks that
// Cleanup (make node-down) leaves nothing: no network namespace, veth,
// route or node cgroup either.
func TestRealNodesCrash(t *testing.T) {
	Require(t)
	before := baseline(t)
	dir := crashChildOf(t, 3)
	require.NoError(t, Cleanup())
	assertNothingLeft(t, before, dir)
}

// TestRealNodeBaselineAfterACrash is the regression test of a CI failure:
// a real node killed by an earlier run (a machine restart mid-test) was in
// the host baseline, so the next Start's undoing of it read as "nftables
// tables differ". The baseline is now taken without any node.
func TestRealNodeBaselineAfterACrash(t *testing.T) {
	Require(t)
	dead := crashChild(t)
	before := baseline(t)
	assert.NoDirExists(t, dead, "the baseline left the dead node's directory")
	c, err := cluster.Start(context.Background(), realOptions(t))
	require.NoError(t, err)
	dir := c.Dir
	require.NoError(t, c.Stop())
	assertNothingLeft(t, before, dir)
}

// TestRealNodeCrashChild is TestRealNodeCrash's child: it starts a real
// node, runs a pod, says so, and waits to be killed.
func TestRealNodeCrashChild(t *testing.T) {
	if os.Getenv(crashChildEnv) != "1" {
		t.Skip("the child of TestRealNodeCrash")
	}
	nodes, _ := strconv.Atoi(os.Getenv(crashNodesEnv))
	c, err := cluster.Start(context.Background(), realNodesOptions(t, nodes))
	require.NoError(t, err)
	pod := sleeper(c)
	require.NoError(t, c.Client.Create(context.Background(), pod))
	waitRunning(t, c, pod)
	// what the fault tests add to the host: a sized volume (a tmpfs
	// mounted under the node's directory) and a fault table
	path := sizedVolume(t, c, "crash", "16Mi")
	require.NotEmpty(t, mountsUnder(path), "the sized volume is mounted")
	_, err = host("table inet "+FaultTablePrefix+"_crash {\n chain input { type filter hook input priority -20; policy accept; }\n}\n", "nft", "-f", "-")
	require.NoError(t, err)
	if nodes > 1 {
		// a node powered off (faults.PowerOff): frozen, its link down
		m := members(nodes)[1]
		require.NoError(t, os.WriteFile(m.freezer()+"/freezer.state", []byte("FROZEN"), 0o644))
		_, err = host("", "ip", "link", "set", m.veth, "down")
		require.NoError(t, err)
	}
	fmt.Println("RUNNING " + c.Dir)
	select {}
}

// TestRealNodeNetwork checks what pods of the real node see: cluster DNS
// (and no answer for outside names), no default route, and the API server
// through the kubernetes Service with their ServiceAccount token, its TLS
// verified against the root CA (kubectl from the host, in-cluster config).
func TestRealNodeNetwork(t *testing.T) {
	Require(t)
	ctx := context.Background()
	c, err := cluster.Start(ctx, realOptions(t, "postgres:17"))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Stop()) })

	// The tools' bin holds symbolic links: mount the binary's own directory.
	kubectl, err := filepath.EvalSymlinks(filepath.Join(c.Bin, "kubectl"))
	require.NoError(t, err)
	script := `set -e
getent hosts kubernetes.default.svc.cluster.local
if getent hosts example.com; then echo "an outside name resolved"; exit 1; fi
if grep -qE '^\S+\s+00000000\s' /proc/net/route; then echo "a default route"; cat /proc/net/route; exit 1; fi
HOME=/tmp /host/` + filepath.Base(kubectl) + ` auth whoami -o jsonpath='{.status.userInfo.username}'`
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "net"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "net", Image: c.Images["postgres:17"], ImagePullPolicy: corev1.PullNever,
				Command:      []string{"bash", "-c", script},
				VolumeMounts: []corev1.VolumeMount{{Name: "host", MountPath: "/host", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: filepath.Dir(kubectl)},
			}}},
		},
	}
	require.NoError(t, c.Client.Create(ctx, pod))
	got := &corev1.Pod{}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Client.Get(ctx, client.ObjectKeyFromObject(pod), got))
		assert.Contains(ct, []corev1.PodPhase{corev1.PodSucceeded, corev1.PodFailed}, got.Status.Phase)
	}, 2*time.Minute, 200*time.Millisecond, "pod did not finish; kubelet log:\n%s", tailLog(c, "kubelet"))
	cs, err := kubernetes.NewForConfig(c.Config)
	require.NoError(t, err)
	logs, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	require.NoError(t, err)
	assert.Equal(t, corev1.PodSucceeded, got.Status.Phase, "pod log:\n%s", logs)
	assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(APIServiceIP)+`\s+kubernetes\.default\.svc\.cluster\.local$`, string(logs))
	assert.Contains(t, string(logs), "system:serviceaccount:default:default")
}

// TestRealNodeVolume checks the real node's storage: a claim of the default
// class gets a local volume, bound before its pod starts (no failed mount
// to retry), and the kubelet applies the pod's fsGroup to it, which a
// non-root PostgreSQL needs to initdb.
func TestRealNodeVolume(t *testing.T) {
	Require(t)
	ctx := context.Background()
	c, err := cluster.Start(ctx, realOptions(t))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Stop()) })

	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	pod := sleeper(c)
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsUser: ptr.To[int64](999), RunAsGroup: ptr.To[int64](999), FSGroup: ptr.To[int64](999),
	}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim.Name},
	}}}
	require.NoError(t, c.Client.Create(ctx, claim))
	require.NoError(t, c.Client.Create(ctx, pod))
	waitRunning(t, c, pod)

	require.NoError(t, c.Client.Get(ctx, client.ObjectKeyFromObject(claim), claim))
	pv := &corev1.PersistentVolume{}
	require.NoError(t, c.Client.Get(ctx, client.ObjectKey{Name: claim.Spec.VolumeName}, pv))
	require.NotNil(t, pv.Spec.Local, "not a local volume: %+v", pv.Spec.PersistentVolumeSource)
	info, err := os.Stat(pv.Spec.Local.Path)
	require.NoError(t, err)
	st := info.Sys().(*syscall.Stat_t)
	assert.Equal(t, uint32(999), st.Gid, "fsGroup not applied to %s", pv.Spec.Local.Path)
	assert.NotZero(t, info.Mode()&os.ModeSetgid, "fsGroup's setgid bit missing on %s", pv.Spec.Local.Path)

	events := &corev1.EventList{}
	require.NoError(t, c.Client.List(ctx, events, client.InNamespace("default")))
	for _, e := range events.Items {
		assert.NotEqual(t, "FailedMount", e.Reason, "%s: %s", e.InvolvedObject.Name, e.Message)
	}

	// a claim of the sized class is a file system of its size, filled
	// without touching the host's disk, and gone with its claim
	path := sizedVolume(t, c, "sized", "16Mi")
	var fs syscall.Statfs_t
	require.NoError(t, syscall.Statfs(path, &fs))
	assert.Equal(t, int64(16<<20), int64(fs.Blocks)*fs.Bsize, "the sized volume's size")
	f, err := os.Create(filepath.Join(path, "fill"))
	require.NoError(t, err)
	err = syscall.Fallocate(int(f.Fd()), 0, 0, 17<<20)
	f.Close()
	assert.ErrorIs(t, err, syscall.ENOSPC, "more than the claim does not fit")
	claim = &corev1.PersistentVolumeClaim{}
	require.NoError(t, c.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "sized"}, claim))
	require.NoError(t, c.Client.Delete(ctx, claim))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, err := os.Stat(path)
		left := &corev1.PersistentVolumeClaim{}
		claimErr := c.Client.Get(ctx, client.ObjectKeyFromObject(claim), left)
		assert.True(ct, os.IsNotExist(err), "the released sized volume %s is unmounted and removed; its volume: %s; its claim: %v %v %v",
			path, describeVolume(c, claim.Spec.VolumeName), claimErr, left.Finalizers, left.DeletionTimestamp)
	}, 3*time.Minute, 100*time.Millisecond, "kube-controller-manager releases a volume within its sync periods")
	assert.Empty(t, mountsUnder(path), "mounts left at %s", path)
}

// sizedVolume creates a claim of cluster.SizedStorageClassName in namespace
// default and returns its volume's directory once bound.
func sizedVolume(t *testing.T, c *cluster.Cluster, name, size string) string {
	t.Helper()
	ctx := context.Background()
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(cluster.SizedStorageClassName),
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
	require.NoError(t, c.Client.Create(ctx, claim))
	class := &storagev1.StorageClass{}
	require.NoError(t, c.Client.Get(ctx, client.ObjectKey{Name: cluster.SizedStorageClassName}, class))
	if class.VolumeBindingMode != nil && *class.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer {
		// several nodes: the volume is made on its first pod's node
		user := sleeper(c)
		user.Name = name + "-user"
		user.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		user.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name},
		}}}
		require.NoError(t, c.Client.Create(ctx, user))
	}
	pv := &corev1.PersistentVolume{}
	require.Eventually(t, func() bool {
		return c.Client.Get(ctx, client.ObjectKeyFromObject(claim), claim) == nil && claim.Spec.VolumeName != "" &&
			c.Client.Get(ctx, client.ObjectKey{Name: claim.Spec.VolumeName}, pv) == nil
	}, time.Minute, 100*time.Millisecond, "claim %s bound", name)
	require.NotNil(t, pv.Spec.Local, "not a local volume: %+v", pv.Spec.PersistentVolumeSource)
	return pv.Spec.Local.Path
}

// describeVolume says what a PersistentVolume is now, for a failure.
func describeVolume(c *cluster.Cluster, name string) string {
	pv := &corev1.PersistentVolume{}
	if err := c.Client.Get(context.Background(), client.ObjectKey{Name: name}, pv); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("phase %s, deleting %v, finalizers %v", pv.Status.Phase, pv.DeletionTimestamp != nil, pv.Finalizers)
}
