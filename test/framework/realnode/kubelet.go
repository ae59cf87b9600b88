package realnode

import (
	"fmt"
	"os"
	"path/filepath"
)

// NodeName is the real node's name.
const NodeName = "dbkeeper-node-0"

// kubeletConfig is the KubeletConfiguration of the real node. Two settings
// are for these VMs (REAL-NODE.md): cgroup v1 (failCgroupV1: false with the
// cgroupfs driver) and no CAP_SYS_RESOURCE (oomScoreAdj 0). syncFrequency
// is 10 s (default 1 min) so that a renewed certificate's Secret reaches
// the mounted files within seconds (the TLS renewal test).
func (n *Node) kubeletConfig(m *member, pki string) string {
	dir := m.dir(n.c.Dir)
	// One of several nodes has its own cgroup root, which its freezer
	// cgroup is (power off).
	cgroupRoot := ""
	if m.multi() {
		cgroupRoot = "cgroupRoot: /" + m.name + "\n"
	}
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
oomScoreAdj: 0
containerRuntimeEndpoint: unix://%[1]s
address: %[2]s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
tlsCertFile: %[3]s/%[7]s.crt
tlsPrivateKeyFile: %[3]s/%[7]s.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[3]s/ca.crt}
authorization:
  mode: Webhook
clusterDomain: %[4]s
clusterDNS: [%[5]s]
# no nameserver: pods with dnsPolicy Default have no upstream
resolvConf: %[6]s/resolv.conf
podLogsDir: %[6]s/pod-logs
volumePluginDir: %[6]s/kubelet-plugins
hairpinMode: hairpin-veth
maxPods: 110
# the images are local, with no registry to pull them again from
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "2%%", imagefs.available: "2%%"}
serializeImagePulls: false
protectKernelDefaults: false
# mounted Secrets follow their Secret on each pod sync: 10 s instead of a
# minute, so a renewed certificate reaches the server quickly in tests
syncFrequency: 10s
%[8]s`, n.containerdSocket(m), m.ip, pki, clusterDomain, DNSServiceIP, dir, m.servingCert(), cgroupRoot)
}

// startKubelet writes a node's kubelet configuration and starts it; one
// of several nodes gets its zone label.
func (n *Node) startKubelet(m *member, pki, kubeconfig string) error {
	dir := m.dir(n.c.Dir)
	for _, d := range []string{"pod-logs", "kubelet-plugins", "kubelet"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return fmt.Errorf("creating the kubelet's directories: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte("search "+clusterDomain+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing the kubelet's resolv.conf: %w", err)
	}
	config := filepath.Join(dir, "kubelet.yaml")
	if err := os.WriteFile(config, []byte(n.kubeletConfig(m, pki)), 0o644); err != nil {
		return fmt.Errorf("writing the kubelet's config: %w", err)
	}
	args := []string{"--config=" + config, "--kubeconfig=" + kubeconfig,
		"--root-dir=" + filepath.Join(dir, "kubelet"), "--node-ip=" + m.ip, "--hostname-override=" + m.name, "--v=1"}
	if m.zone != "" {
		args = append(args, "--node-labels="+ZoneLabel+"="+m.zone)
	}
	return n.start(m, "kubelet", filepath.Join(n.c.Bin, "kubelet"), args...)
}

// ZoneLabel is the zone label of the nodes of a cluster of several.
const ZoneLabel = "topology.kubernetes.io/zone"

// startKubeProxy starts a node's kube-proxy in nftables mode; it leaves
// the host's conntrack settings alone and serves NodePorts on the pods'
// subnet only. On one of several nodes its cluster CIDR is the node's own
// pods' subnet: what comes from elsewhere to a ClusterIP (the host, through
// its Service route) is masqueraded, so that answers come back through
// this node's translation.
func (n *Node) startKubeProxy(m *member, kubeconfig string) error {
	cidr := clusterCIDR
	if m.multi() {
		cidr = m.podSubnet
	}
	config := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %s}
hostnameOverride: %s
mode: nftables
clusterCIDR: %s
oomScoreAdj: 0
nodePortAddresses: [%q]
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
`, kubeconfig, m.name, cidr, m.podSubnet)
	path := filepath.Join(m.dir(n.c.Dir), "kube-proxy.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		return fmt.Errorf("writing kube-proxy's config: %w", err)
	}
	return n.start(m, "kube-proxy", filepath.Join(n.c.Bin, "kube-proxy"), "--config="+path, "--v=1")
}
