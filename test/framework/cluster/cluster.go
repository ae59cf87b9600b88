// Package cluster starts a local Kubernetes cluster for the end-to-end
// suites and `make demo`: etcd and kube-apiserver (through envtest),
// kube-controller-manager (garbage collector, StatefulSet, CronJob, Job, PV
// binder, ...), kube-scheduler, a small volume provisioner so that claims
// bind, and one node (Options.Node) of one of two kinds:
//
//   - FakeNode (the default): kwok fakes the node and what a kubelet would
//     do (pods become Ready; Job pods complete, or fail when labelled so),
//     without containers. Everything listens on 127.0.0.1 only; any number
//     of these run side by side.
//   - RealNode (package test/framework/realnode): a real kubelet with
//     containerd, runc, the CNI bridge plugin, kube-proxy (nftables) and
//     CoreDNS, running the images of images/build.sh. It needs root and
//     changes the host, all recorded in a journal first and undone by
//     Stop, or after a crash by the next Start, realnode.Cleanup or `make
//     node-down`. One runs per machine (a lock).
//
// A node is a Node: this package has the fake one and calls the real one
// through that interface, so that it never imports package realnode.
//
// Stop removes every process and temporary file.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
)

// NodeKind is the kind of node a cluster has.
type NodeKind string

// The node kinds.
const (
	// FakeNode is a kwok node: no containers.
	FakeNode NodeKind = "fake"
	// RealNode is a kubelet with containerd: real containers
	// (test/framework/realnode).
	RealNode NodeKind = "real"
)

// The names a test or a user of the cluster may rely on.
const (
	// NodeName is the fake node every pod is scheduled to.
	NodeName = "kwok-node-0"
	// StorageClassName is the default StorageClass; its claims bind at once.
	StorageClassName = "standard"
	// SizedStorageClassName is a StorageClass of the real node whose
	// volumes are file systems of their claim's size (a tmpfs each), so
	// that a test can fill one (test/framework/faults) without filling
	// the host's disk. Its claims bind at once too.
	SizedStorageClassName = "sized"
	// OutcomeLabel on a Job's pod template with the value OutcomeFail makes
	// its pods fail instead of complete.
	OutcomeLabel = "e2e.dbkeeper.io/outcome"
	// OutcomeFail is the value of OutcomeLabel for failing pods.
	OutcomeFail = "fail"
	// ExitCodeLabel on a failing pod's template sets the exit code of its
	// containers (1 without it).
	ExitCodeLabel = "e2e.dbkeeper.io/exit-code"
)

// Options configure Start.
type Options struct {
	// Progress receives a line per step; nil discards them.
	Progress io.Writer
	// WithoutCRDs leaves the Database CRD out, for tests that install it
	// another way (the Helm chart).
	WithoutCRDs bool
	// Node is the cluster's node: the fake node when nil, or a real one
	// (realnode.New, whose options include the images and how long to
	// wait for another real node on this machine). A Node serves one Start.
	Node Node
	// KeepOnFailure keeps the cluster directory (logs, configs) when Start
	// fails; host changes are undone all the same. The environment
	// variable DBKEEPER_KEEP_CLUSTER=1 keeps it always.
	KeepOnFailure bool
}

// Cluster is a running local cluster.
type Cluster struct {
	// onStop runs at the end of Stop (OnStop).
	onStop []func() error
	// Config is the admin (system:masters) client configuration.
	Config *rest.Config
	// Client is an admin client with dbkeeper's scheme.
	Client client.Client
	// Kubeconfig is the path of an admin kubeconfig file.
	Kubeconfig string
	// Dir holds the kubeconfig, the components' logs and the volumes (on a
	// real node also the certificates, the kubelet's root and containerd's
	// state); Stop removes it, unless DBKEEPER_KEEP_CLUSTER=1.
	Dir string
	// Bin is the directory of the control-plane binaries and kubectl.
	Bin string
	// Node is the kind of the cluster's node.
	Node NodeKind
	// NodeName is the name of the cluster's node.
	NodeName string
	// Images maps the keys of images/build.sh's manifest to the image
	// references imported into the real node ("postgres:15" ->
	// "localhost/dbkeeper/postgres:15"); nil on a fake node.
	Images map[string]string

	progress  io.Writer
	node      Node
	setup     NodeSetup
	env       *crenvtest.Environment
	procs     []*process
	stopProvs context.CancelFunc
	provsDone chan error
	keep      bool
}

// Start starts a cluster and waits until its node is Ready and pods can be
// created. On error nothing is left running. A real node (o.Node) needs
// what its Supported checks; it takes the machine's node lock, undoes what
// a dead real node left, and builds and imports the images of
// images/build.sh.
func Start(ctx context.Context, o Options) (c *Cluster, err error) {
	started := time.Now()
	node := o.Node
	if node == nil {
		node = fakeNode{}
	}
	c = &Cluster{progress: o.Progress, node: node, Node: node.Kind(), NodeName: node.Name(), keep: os.Getenv("DBKEEPER_KEEP_CLUSTER") == "1"}
	if c.progress == nil {
		c.progress = io.Discard
	}
	// The returns below set c to nil: stop what was started through self.
	self := c
	defer func() {
		if err != nil {
			if o.KeepOnFailure && self.Dir != "" {
				self.keep = true
				self.say("keeping " + self.Dir)
			}
			err = errors.Join(err, self.Stop())
			c = nil
		}
	}()
	root, err := envtest.RepoRoot()
	if err != nil {
		return nil, err
	}
	if c.Bin, err = envtest.AssetsDir(); err != nil {
		return nil, err
	}
	c.env = &crenvtest.Environment{BinaryAssetsDirectory: c.Bin}
	if c.setup, err = node.Prepare(ctx, c); err != nil {
		return nil, err
	}
	if !o.WithoutCRDs {
		c.env.CRDDirectoryPaths = []string{filepath.Join(root, "config", "crd", "bases")}
		c.env.ErrorIfCRDPathMissing = true
	}
	if err := c.startControlPlane(); err != nil {
		return nil, err
	}
	if err := c.startComponents(); err != nil {
		return nil, err
	}
	if err := node.Start(ctx, c); err != nil {
		return nil, err
	}
	if err := c.startProvisioner(); err != nil {
		return nil, err
	}
	if err := c.createStorageClasses(ctx); err != nil {
		return nil, err
	}
	c.say("waiting for the node to be Ready and the default ServiceAccount")
	if err := c.waitUsable(ctx); err != nil {
		return nil, err
	}
	c.say(fmt.Sprintf("cluster ready in %s; kubeconfig %s", time.Since(started).Round(100*time.Millisecond), c.Kubeconfig))
	return c, nil
}

func (c *Cluster) say(msg string) { fmt.Fprintf(c.progress, "cluster: %s\n", msg) }

// waitUsable waits for the node to be Ready and for the default
// ServiceAccount, without which no pod can be created.
func (c *Cluster) waitUsable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := c.exited(); err != nil {
			return false, err
		}
		node := &corev1.Node{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: c.NodeName}, node); err != nil {
			return false, nil
		}
		ready := false
		for _, cond := range node.Status.Conditions {
			ready = ready || (cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue)
		}
		sa := &corev1.ServiceAccount{}
		err := c.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "default"}, sa)
		return ready && err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the cluster to be usable: %w", err)
	}
	return nil
}

// Stop stops every component, then the API server and etcd, then the node
// (on a real node: undoes its host changes), and removes Dir. It is safe
// to call on a half-started cluster and more than once.
func (c *Cluster) Stop() error {
	var errs []error
	if c.stopProvs != nil {
		c.stopProvs()
		if err := <-c.provsDone; err != nil {
			errs = append(errs, fmt.Errorf("volume provisioner: %w", err))
		}
		c.stopProvs = nil
	}
	// The node's pods first, while its container runtime runs.
	if c.node != nil {
		if err := c.node.StopPods(c); err != nil {
			errs = append(errs, err)
		}
	}
	c.stopProcesses()
	if c.env != nil {
		if err := c.env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping kube-apiserver and etcd: %w", err))
		}
		c.env = nil
	}
	if c.node != nil {
		if err := c.node.Stop(c); err != nil {
			errs = append(errs, err)
		}
	}
	for i := len(c.onStop) - 1; i >= 0; i-- {
		errs = append(errs, c.onStop[i]())
	}
	c.onStop = nil
	c.Dir = ""
	return errors.Join(errs...)
}

// OnStop registers f to run when the cluster stops, after its node and
// control plane (last registered first), also when a signal stops it: a
// suite's host-side helper (an object store) and its files go with it.
func (c *Cluster) OnStop(f func() error) { c.onStop = append(c.onStop, f) }

// Log returns the log of a component ("kube-controller-manager",
// "kube-scheduler", "kwok"; on a real node also "containerd", "kubelet",
// "kube-proxy", "coredns"), for a failing test to show.
func (c *Cluster) Log(name string) string {
	data, err := os.ReadFile(filepath.Join(c.Dir, name+".log"))
	if err != nil {
		return err.Error()
	}
	return string(data)
}
