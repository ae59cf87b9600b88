package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/test/framework/cluster"
)

// closedRegistry is where containerd sends every registry pull: a closed
// port on loopback, so a missing image fails at once and nothing leaves the
// machine.
const closedRegistry = "http://127.0.0.1:9"

// registryHosts is the hosts.toml of every blocked registry. The [host]
// entry is what containerd 1.6 obeys: with only `server` set it still
// resolved registry-1.docker.io through the host's DNS (measured).
var registryHosts = fmt.Sprintf("server = %[1]q\n\n[host.%[1]q]\n  capabilities = [\"pull\", \"resolve\"]\n", closedRegistry)

// blockedRegistries get a certs.d entry each; "_default" covers any other
// where containerd supports it. "localhost" is the registry of the images
// built here (localhost/dbkeeper/...): one of them missing would otherwise be
// pulled from http://localhost:80, whatever listens there.
var blockedRegistries = []string{"_default", "localhost", "docker.io", "registry.k8s.io", "ghcr.io", "quay.io", "gcr.io", "mcr.microsoft.com", "public.ecr.aws"}

// containerdRoot is containerd's root: its content store and snapshots,
// kept between runs so that each image tarball is imported once.
func containerdRoot() (string, error) {
	home, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("finding the cache directory: %w", err)
	}
	return filepath.Join(home, "dbkeeper", "containerd"), nil
}

func (n *Node) containerdSocket() string {
	return filepath.Join(n.c.Dir, "containerd", "containerd.sock")
}

// writeContainerdConfig writes containerd's config, the registry blocks and
// the CNI configuration.
func (n *Node) writeContainerdConfig(root, pauseImage string) error {
	dir := filepath.Join(n.c.Dir, "containerd")
	for _, reg := range blockedRegistries {
		d := filepath.Join(dir, "certs.d", reg)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("writing containerd's registry config: %w", err)
		}
		if err := os.WriteFile(filepath.Join(d, "hosts.toml"), []byte(registryHosts), 0o644); err != nil {
			return fmt.Errorf("writing containerd's registry config: %w", err)
		}
	}
	sock := n.containerdSocket()
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.grpc.v1.introspection.tcp"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  netns_mounts_under_state_dir = true
  # No CAP_SYS_RESOURCE on these VMs: nothing may lower an oom_score_adj
  # below 0, and a sandbox's -998 makes runc fail ("can't get final child's
  # PID from pipe: EOF"). Clamp to containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %q
`, root, filepath.Join(dir, "state"), sock, sock+".ttrpc", pauseImage,
		cniBinDir(), filepath.Join(n.c.Dir, "cni", "net.d"), filepath.Join(dir, "certs.d"))
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o644); err != nil {
		return fmt.Errorf("writing containerd's config: %w", err)
	}
	// isGateway is false: the bridge has the node IP already, and the
	// plugin's gateway mode switches on forwarding for every interface
	// (net.ipv4.ip_forward=1). Pods get the node IP as the gateway of their
	// one route all the same.
	cni := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "dbkeeper",
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": false,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "dataDir": %q,
      "ranges": [[{"subnet": %q, "rangeStart": %q, "rangeEnd": %q, "gateway": %q}]],
      "routes": [{"dst": %q}]
    }
  }]
}
`, Bridge, filepath.Join(n.c.Dir, "cni", "ipam"), podSubnet, podRangeFrom, podRangeTo, NodeIP, containedRange)
	if err := os.MkdirAll(filepath.Join(n.c.Dir, "cni", "net.d"), 0o755); err != nil {
		return fmt.Errorf("writing the CNI config: %w", err)
	}
	if err := os.WriteFile(filepath.Join(n.c.Dir, "cni", "net.d", "10-dbkeeper.conflist"), []byte(cni), 0o644); err != nil {
		return fmt.Errorf("writing the CNI config: %w", err)
	}
	return nil
}

// startContainerd starts containerd and waits until it answers.
func (n *Node) startContainerd(ctx context.Context, root, pauseImage string) error {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return fmt.Errorf("creating containerd's root: %w", err)
	}
	if err := n.writeContainerdConfig(root, pauseImage); err != nil {
		return err
	}
	if err := n.start("containerd", "containerd", "--config", filepath.Join(n.c.Dir, "containerd", "config.toml")); err != nil {
		return err
	}
	return n.c.Poll(ctx, 30*time.Second, "containerd", func() bool {
		_, err := n.ctr("version")
		return err == nil
	})
}

// ctr runs containerd's own client in the CRI namespace.
func (n *Node) ctr(args ...string) (string, error) {
	return host("", "ctr", append([]string{"--address", n.containerdSocket(), "--namespace", "k8s.io"}, args...)...)
}

// ImportImage imports a docker-archive tarball into the real node's
// containerd, in the namespace the kubelet uses, unless it holds ref
// already (for a reference whose tag names its content, such as a cache
// key); it reports whether it imported. It is cluster.Cluster's
// ImportImage (cluster.ImageImporter).
func (n *Node) ImportImage(ref, tarball string) (bool, error) {
	listed, err := n.ctr("images", "ls", "-q", "name=="+ref)
	if err != nil {
		return false, fmt.Errorf("listing images: %w", err)
	}
	if strings.TrimSpace(listed) != "" {
		return false, nil
	}
	if _, err := n.ctr("images", "import", tarball); err != nil {
		return false, fmt.Errorf("importing %s: %w", tarball, err)
	}
	return true, nil
}

// importImages imports each image tarball unless containerd's store already
// holds that image from the same tarball (a stamp file per tarball in the
// root: importing the PostgreSQL images again takes seconds), and pins the
// pause image so that the kubelet never collects it.
func (n *Node) importImages(root string, images []image) error {
	for _, img := range images {
		stamp := filepath.Join(root, "imported-"+filepath.Base(img.tarball))
		listed, err := n.ctr("images", "ls", "-q", "name=="+img.ref)
		if err != nil {
			return fmt.Errorf("listing images: %w", err)
		}
		if _, err := os.Stat(stamp); err != nil || strings.TrimSpace(listed) == "" {
			n.c.Say("importing image " + img.ref)
			if _, err := n.ctr("images", "import", img.tarball); err != nil {
				return fmt.Errorf("importing %s: %w", img.tarball, err)
			}
			if err := os.WriteFile(stamp, nil, 0o644); err != nil {
				return fmt.Errorf("stamping the import of %s: %w", img.ref, err)
			}
		}
		if img.key == cluster.ImagePause {
			if _, err := n.ctr("images", "label", img.ref, "io.cri-containerd.pinned=pinned"); err != nil {
				return fmt.Errorf("pinning %s: %w", img.ref, err)
			}
		}
	}
	return nil
}

// removeSandboxes removes every pod sandbox containerd knows, with its
// containers, through the CRI (crictl rmp --all --force: the CNI plugin
// releases the addresses, containerd forgets the containers). At start it
// clears what a killed run left in the cached store; at stop, this run's
// pods, before containerd stops.
func (n *Node) removeSandboxes() error {
	crictl := []string{"--runtime-endpoint", "unix://" + n.containerdSocket(), "--timeout", "60s"}
	out, err := host("", filepath.Join(n.c.Bin, "crictl"), append(crictl, "pods", "--quiet")...)
	if err != nil {
		return fmt.Errorf("listing pod sandboxes: %w", err)
	}
	count := len(strings.Fields(out))
	if count == 0 {
		return nil
	}
	if _, err := host("", filepath.Join(n.c.Bin, "crictl"), append(crictl, "rmp", "--all", "--force")...); err != nil {
		return fmt.Errorf("removing pod sandboxes: %w", err)
	}
	n.c.Say(fmt.Sprintf("removed %d pod sandboxes", count))
	return nil
}
