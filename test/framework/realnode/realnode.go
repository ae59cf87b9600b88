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
//
// Options.Nodes > 1 runs several kubelet nodes instead of one, each in a
// network namespace of its own with its own containerd, kubelet and
// kube-proxy (member.go has the layout); test/framework/faults powers them
// off and on and partitions them (Nodes, HoldServiceRouteOff).
package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
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
	// ("pause", "postgres:15", "postgres:17", "postgres:18", "manager");
	// all when empty.
	// The pause image is always needed.
	Images []string
	// Nodes is how many kubelet nodes to run: 0 or 1 for the single node
	// NodeName in the host's network namespace (make demo, the suites);
	// more (up to MaxNodes) for nodes NodeNamePrefix+1.., each with its
	// own network namespace, containerd, kubelet and kube-proxy, and the
	// zone labels zone-a, zone-b, zone-c in turn (member.go).
	Nodes int
}

// Node is a real node: a cluster.Node for one cluster.Start.
type Node struct {
	o       Options
	c       *cluster.Cluster
	images  []image
	journal *journal
	lock    *nodeLock
	members []*member

	mu sync.Mutex
	// heldOff counts, per node, the faults that keep the host's Service
	// route off it (HoldServiceRouteOff).
	heldOff map[string]int
	// serviceGateway is the node the host's Service route goes through.
	serviceGateway string
}

var (
	_ cluster.Node          = (*Node)(nil)
	_ cluster.ImageImporter = (*Node)(nil)
	_ cluster.SizedVolumes  = sizedVolumes{}
)

// New returns a real node for cluster.Options.Node.
func New(o Options) *Node {
	return &Node{o: o, members: members(min(o.Nodes, MaxNodes)), heldOff: map[string]int{}}
}

// Kind is cluster.RealNode.
func (n *Node) Kind() cluster.NodeKind { return cluster.RealNode }

// Name is the name of the (first) node: NodeName, or NodeNamePrefix+"1"
// with several.
func (n *Node) Name() string { return n.members[0].name }

// Supported is the package's Supported.
func (n *Node) Supported() error {
	if n.o.Nodes > MaxNodes {
		return fmt.Errorf("realnode.Options.Nodes is %d, at most %d", n.o.Nodes, MaxNodes)
	}
	return Supported()
}

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
		SeveralNodes:          len(n.members) > 1,
	}, nil
}

// startHost takes the node lock, undoes what a dead owner left, builds the
// images, and makes the host changes the node needs (each recorded in the
// journal first).
func (n *Node) startHost() error {
	c := n.c
	if err := n.Supported(); err != nil {
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
	if !hasKey(n.images, cluster.ImagePause) {
		return fmt.Errorf("images/build.sh printed no %q image", cluster.ImagePause)
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
	if len(n.members) > 1 {
		c.Say(fmt.Sprintf("creating %d nodes' network namespaces, veths, routes and cgroups", len(n.members)))
	}
	if err := n.setUpMembers(); err != nil {
		return err
	}
	for _, d := range []string{"pki", "apiserver", "etcd"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o700); err != nil {
			return fmt.Errorf("creating the cluster directory: %w", err)
		}
	}
	return nil
}

// Start records the control plane's processes in the journal, then starts
// each node's containerd with the images, its kubelet and kube-proxy, then
// CoreDNS and the kube-dns Service; with several nodes it waits for all
// of them to be Ready (the cluster waits for the first).
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
	}{{"kube-proxy.kubeconfig", crenvtest.User{Name: "system:kube-proxy"}}}
	for _, m := range n.members {
		users = append(users, struct {
			file string
			user crenvtest.User
		}{m.kubeconfig(), crenvtest.User{Name: "system:node:" + m.name, Groups: []string{"system:nodes"}}})
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
	for _, m := range n.members {
		c.Say("starting containerd of " + m.String())
		if err := n.startContainerd(ctx, m, pause); err != nil {
			return err
		}
		if err := n.removeSandboxes(m); err != nil {
			return err
		}
	}
	if err := n.importAll(); err != nil {
		return err
	}
	for _, m := range n.members {
		c.Say("starting the kubelet and kube-proxy of " + m.name)
		if err := n.startKubelet(m, pki, filepath.Join(pki, m.kubeconfig())); err != nil {
			return err
		}
		if err := n.startKubeProxy(m, filepath.Join(pki, "kube-proxy.kubeconfig")); err != nil {
			return err
		}
	}
	c.Say("starting CoreDNS on " + NodeIP + ":53")
	if err := n.startDNS(ctx, c.Kubeconfig); err != nil {
		return err
	}
	if len(n.members) == 1 {
		return nil
	}
	return c.Poll(ctx, 2*time.Minute, "every node Ready", func() bool { return n.allReady(ctx) })
}

// start starts a component of a node (or of the host, m nil) through the cluster and records its
// pid in the journal. A component of one of several nodes runs in the
// node's network namespace (nsenter --net, nothing else of the host
// unshared) and in its freezer cgroup, which it joins before it runs: its
// children (containerd's shims) are there too.
func (n *Node) start(m *member, component, path string, args ...string) error {
	name := component // nil: a process of the host's (CoreDNS)
	if m != nil {
		name = m.proc(component)
	}
	if m != nil && m.multi() {
		// sh joins the cgroup, then execs nsenter, which execs the
		// component: one pid all along.
		script := `cg=$1; ns=$2; shift 2; echo $$ > "$cg" && exec nsenter --net="$ns" -- "$@"`
		args = append([]string{"-c", script, "dbk-node-start", m.freezer() + "/cgroup.procs", m.netnsPath(), path}, args...)
		path = "/bin/sh"
	}
	pid, err := n.c.StartProcess(name, path, args...)
	if err != nil {
		return err
	}
	return n.journal.recordPid(name, pid)
}

// StopPods powers every node on (a frozen process cannot be stopped),
// stops the kubelets first, so that they do not restart what goes next,
// then removes the pods while containerd runs.
func (n *Node) StopPods(c *cluster.Cluster) error {
	var errs []error
	if n.journal != nil && len(n.members) > 1 {
		thawCgroups(n.journal, c.Say)
		for _, m := range n.members {
			if _, err := os.Stat("/sys/class/net/" + m.veth); err != nil {
				continue // a Start that failed before making it
			}
			if _, err := host("", "ip", "link", "set", m.veth, "up"); err != nil {
				errs = append(errs, err)
			}
		}
	}
	stopped := false
	for _, m := range n.members {
		stopped = c.StopProcess(m.proc("kubelet")) || stopped
	}
	if !stopped {
		return errors.Join(errs...)
	}
	for _, m := range n.members {
		errs = append(errs, n.removeSandboxes(m))
	}
	return errors.Join(errs...)
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
