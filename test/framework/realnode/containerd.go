package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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

func (n *Node) containerdSocket(m *member) string {
	return filepath.Join(m.dir(n.c.Dir), "containerd", "containerd.sock")
}

// writeContainerdConfig writes a node's containerd config, the registry
// blocks and the CNI configuration.
func (n *Node) writeContainerdConfig(m *member, root, pauseImage string) error {
	mdir := m.dir(n.c.Dir)
	dir := filepath.Join(mdir, "containerd")
	for _, reg := range blockedRegistries {
		d := filepath.Join(dir, "certs.d", reg)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("writing containerd's registry config: %w", err)
		}
		if err := os.WriteFile(filepath.Join(d, "hosts.toml"), []byte(registryHosts), 0o644); err != nil {
			return fmt.Errorf("writing containerd's registry config: %w", err)
		}
	}
	sock := n.containerdSocket(m)
	// One of several nodes keeps runc's state apart from the others'.
	runcRoot := ""
	if m.multi() {
		runcRoot = fmt.Sprintf("\n        Root = %q", filepath.Join(dir, "runc"))
	}
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
        SystemdCgroup = false%s
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %q
`, root, filepath.Join(dir, "state"), sock, sock+".ttrpc", pauseImage, runcRoot,
		cniBinDir(), filepath.Join(mdir, "cni", "net.d"), filepath.Join(dir, "certs.d"))
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o644); err != nil {
		return fmt.Errorf("writing containerd's config: %w", err)
	}
	// isGateway is false on the single node: the bridge has the node IP
	// already, and the plugin's gateway mode switches on forwarding for
	// every interface (net.ipv4.ip_forward=1). Pods get the node IP as the
	// gateway of their one route all the same. One of several nodes has a
	// bridge of its own in its network namespace, which the plugin creates
	// with the gateway address (forwarding is on in that namespace only).
	cni := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "dbkeeper",
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": %t,
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
`, m.bridge, m.multi(), filepath.Join(mdir, "cni", "ipam"), m.podSubnet, m.podFrom, m.podTo, m.podGateway, containedRange)
	if err := os.MkdirAll(filepath.Join(mdir, "cni", "net.d"), 0o755); err != nil {
		return fmt.Errorf("writing the CNI config: %w", err)
	}
	if err := os.WriteFile(filepath.Join(mdir, "cni", "net.d", "10-dbkeeper.conflist"), []byte(cni), 0o644); err != nil {
		return fmt.Errorf("writing the CNI config: %w", err)
	}
	return nil
}

// startContainerd starts a node's containerd and waits until it answers.
func (n *Node) startContainerd(ctx context.Context, m *member, pauseImage string) error {
	root, err := m.containerdRoot()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return fmt.Errorf("creating containerd's root: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(m.dir(n.c.Dir), "containerd"), 0o755); err != nil {
		return fmt.Errorf("creating containerd's directory: %w", err)
	}
	if err := n.writeContainerdConfig(m, root, pauseImage); err != nil {
		return err
	}
	path, err := exec.LookPath("containerd")
	if err != nil {
		return fmt.Errorf("finding containerd: %w", err)
	}
	if err := n.start(m, "containerd", path, "--config", filepath.Join(m.dir(n.c.Dir), "containerd", "config.toml")); err != nil {
		return err
	}
	return n.c.Poll(ctx, 30*time.Second, "containerd of "+m.name, func() bool {
		_, err := n.ctr(m, "version")
		return err == nil
	})
}

// ctr runs containerd's own client for a node's containerd in the CRI
// namespace.
func (n *Node) ctr(m *member, args ...string) (string, error) {
	return host("", "ctr", append([]string{"--address", n.containerdSocket(m), "--namespace", "k8s.io"}, args...)...)
}

// ImportImage imports a docker-archive tarball into the real node's
// containerd, in the namespace the kubelet uses, unless it holds ref
// already (for a reference whose tag names its content, such as a cache
// key); it reports whether it imported. It is cluster.Cluster's
// ImportImage (cluster.ImageImporter).
// With several nodes it imports into each.
func (n *Node) ImportImage(ref, tarball string) (bool, error) {
	imported := false
	for _, m := range n.members {
		listed, err := n.ctr(m, "images", "ls", "-q", "name=="+ref)
		if err != nil {
			return imported, fmt.Errorf("listing images: %w", err)
		}
		if strings.TrimSpace(listed) != "" {
			continue
		}
		if _, err := n.ctr(m, "images", "import", tarball); err != nil {
			return imported, fmt.Errorf("importing %s into %s: %w", tarball, m.name, err)
		}
		imported = true
	}
	return imported, nil
}

// TagImage gives an imported image another reference on every node, as a
// registry serves the same content under a new tag: in a test, a catalog
// that moved to another minor release.
func (n *Node) TagImage(ref, tag string) error {
	for _, m := range n.members {
		if _, err := n.ctr(m, "images", "tag", "--force", ref, tag); err != nil {
			return fmt.Errorf("tagging %s as %s on %s: %w", ref, tag, m.name, err)
		}
	}
	return nil
}

// importAll imports the images into every node's containerd, the nodes
// side by side.
func (n *Node) importAll() error {
	errs := make([]error, len(n.members))
	var wg sync.WaitGroup
	for i, m := range n.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			root, err := m.containerdRoot()
			if err == nil {
				err = n.importImages(m, root, n.images)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// importImages imports each image tarball unless containerd's store already
// holds that image from the same tarball (a stamp file per tarball in the
// root: importing the PostgreSQL images again takes seconds), and pins the
// pause image so that the kubelet never collects it.
func (n *Node) importImages(m *member, root string, images []image) error {
	for _, img := range images {
		stamp := filepath.Join(root, "imported-"+filepath.Base(img.tarball))
		listed, err := n.ctr(m, "images", "ls", "-q", "name=="+img.ref)
		if err != nil {
			return fmt.Errorf("listing images: %w", err)
		}
		if _, err := os.Stat(stamp); err != nil || strings.TrimSpace(listed) == "" {
			n.c.Say("importing image " + img.ref + " into " + m.name)
			if _, err := n.ctr(m, "images", "import", img.tarball); err != nil {
				return fmt.Errorf("importing %s: %w", img.tarball, err)
			}
			if err := os.WriteFile(stamp, nil, 0o644); err != nil {
				return fmt.Errorf("stamping the import of %s: %w", img.ref, err)
			}
		}
		if img.key == cluster.ImagePause {
			if _, err := n.ctr(m, "images", "label", img.ref, "io.cri-containerd.pinned=pinned"); err != nil {
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
func (n *Node) removeSandboxes(m *member) error {
	crictl := []string{"--runtime-endpoint", "unix://" + n.containerdSocket(m), "--timeout", "60s"}
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
	n.c.Say(fmt.Sprintf("removed %d pod sandboxes of %s", count, m.name))
	return nil
}
