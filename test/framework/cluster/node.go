package cluster

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Node is the node of a cluster (Options.Node): the fake node of this
// package when nil, or the real one of package realnode. Start calls
// Prepare before etcd and kube-apiserver start, then Start once they,
// kube-controller-manager and kube-scheduler run; Stop calls StopPods
// first, while every process runs, and Stop last, once they all exited
// and the control plane stopped. A Node serves one cluster.
type Node interface {
	// Kind is the cluster's Node.
	Kind() NodeKind
	// Name is the name of the Node object, the cluster's NodeName.
	Name() string
	// Supported tells why the node cannot run on this machine, or returns
	// nil.
	Supported() error
	// Prepare creates the cluster's directory (Dir), configures the
	// control plane (Env) for the node, and says what else the node needs
	// of the cluster.
	Prepare(ctx context.Context, c *Cluster) (NodeSetup, error)
	// Start starts the node's components (StartProcess) and creates what
	// the node needs in the API; Start waits for the node to be Ready.
	Start(ctx context.Context, c *Cluster) error
	// StopPods stops the node's pods while its container runtime runs.
	StopPods(c *Cluster) error
	// Stop undoes what Prepare and Start did, and removes Dir unless
	// Keep. It also runs after a failed Prepare or Start, and may run
	// twice.
	Stop(c *Cluster) error
}

// NodeSetup is what a node needs of the cluster besides its own
// components.
type NodeSetup struct {
	// ControllerManagerArgs are added to kube-controller-manager's flags.
	ControllerManagerArgs []string
	// LocalVolumes makes the provisioner's volumes `local` ones with
	// affinity to the node, in a fresh directory each (a kubelet applies a
	// pod's fsGroup to local volumes, not to hostPath), instead of hostPath
	// volumes no kubelet ever mounts.
	LocalVolumes bool
	// SizedVolumes, with LocalVolumes, adds the StorageClass
	// SizedStorageClassName, whose volumes it mounts.
	SizedVolumes SizedVolumes
	// SeveralNodes, with LocalVolumes, makes the StorageClasses bind
	// WaitForFirstConsumer and gives a claim its local volume on the node
	// the scheduler selected for its first pod (the claim's
	// volume.kubernetes.io/selected-node annotation), instead of on the
	// cluster's NodeName at once.
	SeveralNodes bool
}

// SizedVolumes gives a volume of SizedStorageClassName a file system of
// its claim's size.
type SizedVolumes interface {
	// Mount mounts a file system of size bytes on path, the volume's
	// directory.
	Mount(path string, size int64) error
	// Unmount unmounts the file system on path, if there is one.
	Unmount(path string) error
}

// ImageImporter is a node with a container runtime that images can be
// imported into (ImportImage).
type ImageImporter interface {
	ImportImage(ref, tarball string) (bool, error)
}

// ImportImage imports a docker-archive tarball into the real node's
// container runtime, unless it holds ref already (for a reference whose
// tag names its content, such as a cache key); it reports whether it
// imported.
func (c *Cluster) ImportImage(ref, tarball string) (bool, error) {
	n, ok := c.node.(ImageImporter)
	if !ok {
		return false, fmt.Errorf("importing %s: images are imported into a real node, not a %s one", ref, c.Node)
	}
	return n.ImportImage(ref, tarball)
}

// What a Node uses of the cluster besides its exported fields.

// Env is the envtest environment of etcd and kube-apiserver: a Node's
// Prepare configures it, its Start may add users.
func (c *Cluster) Env() *crenvtest.Environment { return c.env }

// Say prints a line of progress.
func (c *Cluster) Say(msg string) { c.say(msg) }

// Keep reports whether Stop leaves Dir in place (DBKEEPER_KEEP_CLUSTER=1,
// or Options.KeepOnFailure after a failed Start).
func (c *Cluster) Keep() bool { return c.keep }

// Poll waits up to timeout for cond, failing early when a component exits.
func (c *Cluster) Poll(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		if err := c.exited(); err != nil {
			return false, err
		}
		return cond(), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}
