// Package cluster starts a local Kubernetes cluster for the end-to-end
// suites and `make demo`: etcd and kube-apiserver (through envtest),
// kube-controller-manager (garbage collector, StatefulSet, CronJob, Job, PV
// binder, ...), kube-scheduler, a small volume provisioner so that claims
// bind, and one node of one of two kinds:
//
//   - FakeNode (the default): kwok fakes the node and what a kubelet would
//     do (pods become Ready; Job pods complete, or fail when labelled so),
//     without containers. Everything listens on 127.0.0.1 only; any number
//     of these run side by side.
//   - RealNode: a real kubelet with containerd, runc, the CNI bridge plugin,
//     kube-proxy (nftables) and CoreDNS, running the images of
//     images/build.sh. It needs root and changes the host (a bridge, a
//     route, nftables tables, sysctls, mounts, cgroups), all recorded in a
//     journal first and undone by Stop, or after a crash by the next Start,
//     CleanupRealNode or `make node-down`. One runs per machine (a lock).
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
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/dbkeeper/dbkeeper/internal/manager"
	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
)

// NodeKind is the kind of node a cluster has.
type NodeKind string

// The node kinds.
const (
	// FakeNode is a kwok node: no containers.
	FakeNode NodeKind = "fake"
	// RealNode is a kubelet with containerd: real containers.
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
	// Node is the kind of node; FakeNode when empty.
	Node NodeKind
	// LockWait is how long a RealNode Start waits for another real node on
	// this machine to stop; without it, Start refuses at once.
	LockWait time.Duration
	// KeepOnFailure keeps the cluster directory (logs, configs) when Start
	// fails; host changes are undone all the same. The environment
	// variable DBKEEPER_KEEP_CLUSTER=1 keeps it always.
	KeepOnFailure bool
	// Images are the keys of images/build.sh to build and import on a real
	// node ("pause", "postgres:15", "postgres:17", "manager"); all when
	// empty. The pause image is always needed.
	Images []string
}

// Cluster is a running local cluster.
type Cluster struct {
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
	env       *crenvtest.Environment
	procs     []*process
	stopProvs context.CancelFunc
	provsDone chan error
	journal   *journal
	lock      *nodeLock
	keep      bool
}

// Start starts a cluster and waits until its node is Ready and pods can be
// created. On error nothing is left running. A RealNode cluster needs what
// RealNodeSupported checks; its Start takes the machine's node lock
// (waiting up to o.LockWait), undoes what a dead real node left, and builds
// and imports the images of images/build.sh.
func Start(ctx context.Context, o Options) (c *Cluster, err error) {
	started := time.Now()
	c = &Cluster{progress: o.Progress, Node: o.Node, NodeName: NodeName, keep: os.Getenv("DBKEEPER_KEEP_CLUSTER") == "1"}
	if c.progress == nil {
		c.progress = io.Discard
	}
	if c.Node == "" {
		c.Node = FakeNode
	}
	// The returns below set c to nil: stop what was started through self.
	self := c
	defer func() {
		if err != nil {
			if o.KeepOnFailure && self.Dir != "" {
				self.keep = true
				if self.journal != nil {
					self.journal.Keep = true
				}
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
	var images []image
	switch c.Node {
	case FakeNode:
		if c.Dir, err = os.MkdirTemp("", "dbkeeper-cluster-"); err != nil {
			return nil, fmt.Errorf("creating the cluster directory: %w", err)
		}
		// envtest's default range is a /24: 254 Services. The benchmark makes
		// two Services per Database, for 1,000 Databases and their floor.
		c.env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", serviceRange)
	case RealNode:
		c.NodeName = RealNodeName
		if images, err = c.startRealNodeHost(root, o); err != nil {
			return nil, err
		}
		if err := c.configureRealNodeAPIServer(); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown node kind %q (want %q or %q)", c.Node, FakeNode, RealNode)
	}

	c.say("starting etcd and kube-apiserver")
	if !o.WithoutCRDs {
		c.env.CRDDirectoryPaths = []string{filepath.Join(root, "config", "crd", "bases")}
		c.env.ErrorIfCRDPathMissing = true
	}
	if _, err := c.env.Start(); err != nil {
		return nil, fmt.Errorf("starting etcd and kube-apiserver: %w", err)
	}
	admin, err := c.env.AddUser(crenvtest.User{Name: "dbkeeper-e2e-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("adding the admin user: %w", err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return nil, fmt.Errorf("writing the admin kubeconfig: %w", err)
	}
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, kubeconfig, 0o600); err != nil {
		return nil, fmt.Errorf("writing the admin kubeconfig: %w", err)
	}
	c.Config = admin.Config()
	if c.Client, err = client.New(c.Config, client.Options{Scheme: manager.Scheme()}); err != nil {
		return nil, fmt.Errorf("creating the admin client: %w", err)
	}

	if c.journal != nil {
		// envtest's etcd and API server get no Pdeathsig: the journal
		// names them, and teardown finds them by their directories.
		for _, pid := range processesReferring(c.Dir + "/") {
			if err := c.journal.recordPid(firstWord(cmdline(pid)), pid); err != nil {
				return nil, err
			}
		}
	}
	if err := c.startComponents(); err != nil {
		return nil, err
	}
	if c.Node == RealNode {
		if err := c.startRealNode(ctx, images); err != nil {
			return nil, err
		}
	}
	if err := c.startProvisioner(); err != nil {
		return nil, err
	}
	if c.Node == FakeNode {
		if err := c.createFakeNode(ctx); err != nil {
			return nil, err
		}
	}
	if err := c.createStorageClass(ctx); err != nil {
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

// startComponents starts kube-controller-manager and kube-scheduler, and
// kwok for a fake node.
func (c *Cluster) startComponents() error {
	sa := filepath.Join(c.env.ControlPlane.APIServer.CertDir, "sa-signer.key")
	kc := "--kubeconfig=" + c.Kubeconfig
	kcm := []string{kc, "--leader-elect=false", "--secure-port=0", "--controllers=*",
		"--use-service-account-credentials=false", "--service-account-private-key-file=" + sa,
		"--kube-api-qps=200", "--kube-api-burst=400", "--concurrent-gc-syncs=20"}
	if c.Node == RealNode {
		// Pods trust the API server through the root CA in their token's
		// ConfigMap.
		kcm = append(kcm, "--root-ca-file="+filepath.Join(c.Dir, "pki", "ca.crt"))
	}
	scheduler := []string{kc, "--leader-elect=false", "--secure-port=0", "--kube-api-qps=200", "--kube-api-burst=400"}
	for _, comp := range []struct {
		name string
		args []string
	}{{"kube-controller-manager", kcm}, {"kube-scheduler", scheduler}} {
		c.say("starting " + comp.name)
		if err := c.run(comp.name, comp.args...); err != nil {
			return err
		}
	}
	if c.Node == FakeNode {
		return c.startKwok()
	}
	return nil
}

func (c *Cluster) startProvisioner() error {
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{
		Scheme:                 manager.Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Logger:                 logr.Discard(),
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return fmt.Errorf("creating the volume provisioner: %w", err)
	}
	p := &provisioner{client: mgr.GetClient(), dir: c.Dir}
	if c.Node == RealNode {
		p.node = RealNodeName
	}
	if err := p.setup(mgr); err != nil {
		return fmt.Errorf("setting up the volume provisioner: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.stopProvs, c.provsDone = cancel, make(chan error, 1)
	go func() { c.provsDone <- mgr.Start(ctx) }()
	return nil
}

// createStorageClass creates the default StorageClass of the provisioner,
// and on a real node the sized one.
func (c *Cluster) createStorageClass(ctx context.Context) error {
	names := []string{StorageClassName}
	if c.Node == RealNode {
		names = append(names, SizedStorageClassName)
	}
	for _, name := range names {
		sc := &storagev1.StorageClass{
			ObjectMeta:           metav1.ObjectMeta{Name: name},
			Provisioner:          Provisioner,
			AllowVolumeExpansion: ptr.To(name == StorageClassName),
			VolumeBindingMode:    ptr.To(storagev1.VolumeBindingImmediate),
			ReclaimPolicy:        ptr.To(corev1.PersistentVolumeReclaimDelete),
		}
		if name == StorageClassName {
			sc.Annotations = map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}
		}
		if err := c.Client.Create(ctx, sc); err != nil {
			return fmt.Errorf("creating StorageClass %s: %w", name, err)
		}
	}
	return nil
}

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

// poll waits up to timeout for cond, failing early when a component exits.
func (c *Cluster) poll(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
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

// Stop stops every component, then the API server and etcd, and removes
// Dir. It is safe to call on a half-started cluster and more than once.
func (c *Cluster) Stop() error {
	var errs []error
	if c.stopProvs != nil {
		c.stopProvs()
		if err := <-c.provsDone; err != nil {
			errs = append(errs, fmt.Errorf("volume provisioner: %w", err))
		}
		c.stopProvs = nil
	}
	// The kubelet first, so that it does not restart what goes next, then
	// the pods while containerd runs.
	for _, p := range c.procs {
		if p.name == "kubelet" {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.done
			}
			if err := c.removeSandboxes(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, p := range c.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range c.procs {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	c.procs = nil
	if c.env != nil {
		if err := c.env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping kube-apiserver and etcd: %w", err))
		}
		c.env = nil
	}
	if c.Node == RealNode {
		if err := c.stopRealNode(); err != nil {
			errs = append(errs, err)
		}
	} else if c.Dir != "" && !c.keep {
		if err := os.RemoveAll(c.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	c.Dir = ""
	return errors.Join(errs...)
}

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
