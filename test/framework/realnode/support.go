package realnode

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/dbkeeper/dbkeeper/test/framework/cluster"
	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
)

// Packages are the Debian packages a real node needs.
var Packages = []string{"containerd", "runc", "containernetworking-plugins", "nftables", "iptables", "conntrack", "mmdebstrap", "umoci", "skopeo"}

// Supported tells why a real node cannot run on this machine, or
// returns nil: it needs root, the packages' commands and CNI plugins, the
// kubelet, kube-proxy, CoreDNS and crictl built by test/tools/install.sh, nftables,
// and the power to create a bridge (it creates and deletes a probe bridge,
// unless the node's own bridge exists).
func Supported() error {
	if os.Geteuid() != 0 {
		return errors.New("a real node needs root (bridge, nftables, mounts, containerd)")
	}
	var missing []string
	for _, cmd := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "nft", "ip", "sysctl", "iptables"} {
		if _, err := exec.LookPath(cmd); err != nil {
			missing = append(missing, cmd)
		}
	}
	for _, plugin := range cniPlugins {
		if _, err := os.Stat(filepath.Join(cniBinDir(), plugin)); err != nil {
			missing = append(missing, filepath.Join(cniBinDir(), plugin))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %v: install the Debian packages %v", missing, Packages)
	}
	bin, err := envtest.AssetsDir()
	if err != nil {
		return err
	}
	for _, b := range []string{"kubelet", "kube-proxy", "coredns", "crictl"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return fmt.Errorf("no %s in %s: run test/tools/install.sh", b, bin)
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup"); err != nil {
		return errors.New("no cgroup file system at /sys/fs/cgroup")
	}
	if _, err := host("", "nft", "list", "tables"); err != nil {
		return fmt.Errorf("nftables does not work: %w", err)
	}
	if _, err := os.Stat("/sys/class/net/" + Bridge); err == nil {
		return nil
	}
	probe := "dbk-probe" + strconv.Itoa(os.Getpid()%100000)
	if _, err := host("", "ip", "link", "add", probe, "type", "bridge"); err != nil {
		return fmt.Errorf("cannot create a bridge: %w", err)
	}
	if _, err := host("", "ip", "link", "del", probe); err != nil {
		return fmt.Errorf("deleting the probe bridge %s: %w", probe, err)
	}
	return nil
}

// cniPlugins are the CNI plugins the node's network uses.
var cniPlugins = []string{"bridge", "host-local", "loopback"}

// cniBinDir is where the CNI plugins are: Debian's containernetworking-plugins
// put them in /usr/lib/cni, upstream's tarball in /opt/cni/bin.
func cniBinDir() string {
	for _, dir := range []string{"/usr/lib/cni", "/opt/cni/bin"} {
		if _, err := os.Stat(filepath.Join(dir, "bridge")); err == nil {
			return dir
		}
	}
	return "/usr/lib/cni"
}

// Require skips a test that needs a real node, with the reason (Supported)
// or because of -short; it fails the test instead when
// cluster.RequireRealNodeEnv=1.
func Require(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real node; skipped under -short")
	}
	if err := Supported(); err != nil {
		if os.Getenv(cluster.RequireRealNodeEnv) == "1" {
			t.Fatalf("%s=1 but a real node cannot run here: %v", cluster.RequireRealNodeEnv, err)
		}
		t.Skipf("a real node cannot run here: %v", err)
	}
}
