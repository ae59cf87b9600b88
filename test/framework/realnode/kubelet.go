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
func (n *Node) kubeletConfig(pki string) string {
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
tlsCertFile: %[3]s/kubelet-serving.crt
tlsPrivateKeyFile: %[3]s/kubelet-serving.key
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
`, n.containerdSocket(), NodeIP, pki, clusterDomain, DNSServiceIP, n.c.Dir)
}

// startKubelet writes the kubelet's configuration and starts it.
func (n *Node) startKubelet(pki, kubeconfig string) error {
	for _, d := range []string{"pod-logs", "kubelet-plugins", "kubelet"} {
		if err := os.MkdirAll(filepath.Join(n.c.Dir, d), 0o755); err != nil {
			return fmt.Errorf("creating the kubelet's directories: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(n.c.Dir, "resolv.conf"), []byte("search "+clusterDomain+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing the kubelet's resolv.conf: %w", err)
	}
	config := filepath.Join(n.c.Dir, "kubelet.yaml")
	if err := os.WriteFile(config, []byte(n.kubeletConfig(pki)), 0o644); err != nil {
		return fmt.Errorf("writing the kubelet's config: %w", err)
	}
	return n.start("kubelet", filepath.Join(n.c.Bin, "kubelet"), "--config="+config, "--kubeconfig="+kubeconfig,
		"--root-dir="+filepath.Join(n.c.Dir, "kubelet"), "--node-ip="+NodeIP, "--hostname-override="+NodeName, "--v=1")
}

// startKubeProxy starts kube-proxy in nftables mode; it leaves the host's
// conntrack settings alone and serves NodePorts on the pods' subnet only.
func (n *Node) startKubeProxy(kubeconfig string) error {
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
`, kubeconfig, NodeName, clusterCIDR, podSubnet)
	path := filepath.Join(n.c.Dir, "kube-proxy.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		return fmt.Errorf("writing kube-proxy's config: %w", err)
	}
	return n.start("kube-proxy", filepath.Join(n.c.Bin, "kube-proxy"), "--config="+path, "--v=1")
}
