// Package realnode is the real node of the local cluster
// (test/framework/cluster): a kubelet with containerd, runc, the CNI
// bridge plugin, kube-proxy (nftables) and CoreDNS, running the images of
// images/build.sh. New makes one for cluster.Options.Node:
//
//	c, err := cluster.Start(ctx, cluster.Options{Node: realnode.New(realnode.Options{})})
//
// It needs root (Supported says what is missing) and changes the host (a
// bridge, a route, nftables tables, sysctls, mounts, cgroups), all
// recorded in a journal first and undone by the cluster's Stop, or after a
// crash by the next Start, Cleanup or `make node-down` (cmd/node-down).
// One runs per machine (a lock).
package realnode

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/dbkeeper/dbkeeper/test/framework/cluster"
	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
)

// Options configure a real node.
type Options struct {
	// LockWait is how long cluster.Start waits for another real node on this
	// machine to stop; without it, it refuses at once.
	LockWait time.Duration
	// Images are the keys of images/build.sh to build and import
	// ("pause", "postgres:15", "postgres:17", "manager"); all when empty.
	// The pause image is always needed.
	Images []string
}

// Node is a real node: a cluster.Node for one cluster.Start.
type Node struct {
	o       Options
	c       *cluster.Cluster
	images  []image
	journal *journal
	lock    *nodeLock
}

var (
	_ cluster.Node          = (*Node)(nil)
	_ cluster.ImageImporter = (*Node)(nil)
	_ cluster.SizedVolumes  = sizedVolumes{}
)

// New returns a real node for cluster.Options.Node.
func New(o Options) *Node { return &Node{o: o} }

// Kind is cluster.RealNode.
func (n *Node) Kind() cluster.NodeKind { return cluster.RealNode }

// Name is NodeName.
func (n *Node) Name() string { return NodeName }

// Supported is the package's Supported.
func (n *Node) Supported() error { return Supported() }

// Prepare takes the node lock, undoes what a dead owner left, builds the
// images, makes the host changes the node needs (each recorded in the
// journal first), and configures the API server for the node.
func (n *Node) Prepare(_ context.Context, c *cluster.Cluster) (cluster.NodeSetup, error) {
	n.c = c
	if err := n.startHost(); err != nil {
		return cluster.NodeSetup{}, err
	}
	if err := n.configureAPIServer(); err != nil {
		return cluster.NodeSetup{}, err
	}
	return cluster.NodeSetup{
		// Pods trust the API server through the root CA in their token's
		// ConfigMap.
		ControllerManagerArgs: []string{"--root-ca-file=" + filepath.Join(c.Dir, "pki", "ca.crt")},
		LocalVolumes:          true,
		SizedVolumes:          sizedVolumes{},
	}, nil
}

// startHost takes the node lock, undoes what a dead owner left, builds the
// images, and makes the host changes the node needs (each recorded in the
// journal first).
func (n *Node) startHost() error {
	c := n.c
	if err := Supported(); err != nil {
		return fmt.Errorf("a real node cannot run here: %w", err)
	}
	root, err := envtest.RepoRoot()
	if err != nil {
		return err
	}
	lock, err := acquireLock(n.o.LockWait, c.Say)
	if err != nil {
		return err
	}
	n.lock = lock
	if err := cleanupDead(c.Say); err != nil {
		return fmt.Errorf("cleaning up after a dead real node: %w", err)
	}
	if n.images, err = buildImages(root, n.o.Images, c.Say); err != nil {
		return err
	}
	c.Images = map[string]string{}
	for _, img := range n.images {
		c.Images[img.key] = img.ref
	}
	if c.Dir, err = newRealNodeDir(); err != nil {
		return err
	}
	croot, err := containerdRoot()
	if err != nil {
		return err
	}
	n.journal = &journal{Owner: os.Getpid(), Dir: c.Dir, ContainerdRoot: croot, Keep: c.Keep(), Started: time.Now()}
	if err := n.journal.save(); err != nil {
		return err
	}
	c.Say(fmt.Sprintf("creating bridge %s (%s/24), the Service route and the guard table inet %s", Bridge, NodeIP, guardTable))
	if err := setUpNetwork(n.journal); err != nil {
		return err
	}
	for _, d := range []string{"pki", "apiserver", "etcd"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o700); err != nil {
			return fmt.Errorf("creating the cluster directory: %w", err)
		}
	}
	return nil
}

// configureAPIServer makes envtest's API server reachable from pods and
// fit for a kubelet: it listens on the node IP with a serving certificate
// from the node's CA (its names include the kubernetes Service's), has the
// ServiceAccount admission plugin back (pods of an in-cluster operator
// need their token), authorizes nodes, and has a client certificate for
// the kubelet's API (kubectl logs/exec).
func (n *Node) configureAPIServer() error {
	dir, env := n.c.Dir, n.c.Env()
	pki := filepath.Join(dir, "pki")
	api := env.ControlPlane.GetAPIServer()
	api.CertDir = filepath.Join(dir, "apiserver")
	env.ControlPlane.Etcd = &crenvtest.Etcd{DataDir: filepath.Join(dir, "etcd")}
	ca, err := writeNodePKI(api.CertDir, pki, NodeName)
	if err != nil {
		return err
	}
	port, err := freePortOn(NodeIP)
	if err != nil {
		return err
	}
	api.SecureServing.Address, api.SecureServing.Port = NodeIP, strconv.Itoa(port)
	// envtest skips generating apiserver.crt when it exists; then the admin
	// configuration must trust our CA instead of its own.
	api.SecureServing.CA = ca.pem
	args := api.Configure()
	args.Set("service-cluster-ip-range", realServiceRange)
	args.Set("advertise-address", NodeIP)
	args.Disable("disable-admission-plugins")
	args.Set("enable-admission-plugins", "ServiceAccount,NodeRestriction")
	args.Set("authorization-mode", "Node,RBAC")
	args.Set("kubelet-client-certificate", filepath.Join(pki, "apiserver-kubelet-client.crt"))
	args.Set("kubelet-client-key", filepath.Join(pki, "apiserver-kubelet-client.key"))
	args.Set("kubelet-certificate-authority", filepath.Join(pki, "ca.crt"))
	args.Set("kubelet-preferred-address-types", "InternalIP")
	args.Set("service-account-issuer", "https://kubernetes.default.svc."+clusterDomain)
	return nil
}

// freePortOn returns a TCP port nobody listens on now at address ip.
func freePortOn(ip string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, fmt.Errorf("finding a free port on %s: %w", ip, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start records the control plane's processes in the journal, then starts
// containerd with the images, the kubelet, kube-proxy, CoreDNS and the
// kube-dns Service.
func (n *Node) Start(ctx context.Context, c *cluster.Cluster) error {
	// envtest's etcd and API server, kube-controller-manager and
	// kube-scheduler: teardown also finds them by their directories.
	for _, pid := range processesReferring(c.Dir + "/") {
		if err := n.journal.recordPid(firstWord(cmdline(pid)), pid); err != nil {
			return err
		}
	}
	pki := filepath.Join(c.Dir, "pki")
	users := []struct {
		file string
		user crenvtest.User
	}{
		{"kubelet.kubeconfig", crenvtest.User{Name: "system:node:" + NodeName, Groups: []string{"system:nodes"}}},
		{"kube-proxy.kubeconfig", crenvtest.User{Name: "system:kube-proxy"}},
	}
	for _, u := range users {
		au, err := c.Env().AddUser(u.user, nil)
		if err != nil {
			return fmt.Errorf("adding user %s: %w", u.user.Name, err)
		}
		data, err := au.KubeConfig()
		if err != nil {
			return fmt.Errorf("writing the kubeconfig of %s: %w", u.user.Name, err)
		}
		if err := os.WriteFile(filepath.Join(pki, u.file), data, 0o600); err != nil {
			return fmt.Errorf("writing the kubeconfig of %s: %w", u.user.Name, err)
		}
	}
	pause := ""
	for _, img := range n.images {
		if img.key == cluster.ImagePause {
			pause = img.ref
		}
	}
	c.Say("starting containerd")
	if err := n.startContainerd(ctx, n.journal.ContainerdRoot, pause); err != nil {
		return err
	}
	if err := n.removeSandboxes(); err != nil {
		return err
	}
	if err := n.importImages(n.journal.ContainerdRoot, n.images); err != nil {
		return err
	}
	c.Say("starting the kubelet and kube-proxy")
	if err := n.startKubelet(pki, filepath.Join(pki, "kubelet.kubeconfig")); err != nil {
		return err
	}
	if err := n.startKubeProxy(filepath.Join(pki, "kube-proxy.kubeconfig")); err != nil {
		return err
	}
	c.Say("starting CoreDNS on " + NodeIP + ":53")
	return n.startDNS(ctx, c.Kubeconfig)
}

// start starts a component of the node through the cluster and records
// its pid in the journal.
func (n *Node) start(name, path string, args ...string) error {
	pid, err := n.c.StartProcess(name, path, args...)
	if err != nil {
		return err
	}
	return n.journal.recordPid(name, pid)
}

// StopPods stops the kubelet first, so that it does not restart what goes
// next, then removes the pods while containerd runs.
func (n *Node) StopPods(c *cluster.Cluster) error {
	if !c.StopProcess("kubelet") {
		return nil
	}
	return n.removeSandboxes()
}

// Stop undoes the host changes and releases the lock, after the processes
// were stopped.
func (n *Node) Stop(c *cluster.Cluster) error {
	if n.journal == nil {
		n.lock.release()
		n.lock = nil
		return nil
	}
	// cluster.Options.KeepOnFailure after a failed Start
	n.journal.Keep = n.journal.Keep || c.Keep()
	err := undo(n.journal, c.Say)
	n.journal = nil
	n.lock.release()
	n.lock = nil
	return err
}
