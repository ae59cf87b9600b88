package cluster

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// serviceRange is the Services' cluster IP range: 65,534 addresses.
const serviceRange = "10.96.0.0/16"

//go:embed job-outcome.yaml
var jobOutcomeStages []byte

// fakeNode is the Node of kwok, the default: no containers, no root,
// everything on 127.0.0.1.
type fakeNode struct{}

func (fakeNode) Kind() NodeKind   { return FakeNode }
func (fakeNode) Name() string     { return NodeName }
func (fakeNode) Supported() error { return nil }

// Prepare creates the cluster directory and widens the Services' range.
func (fakeNode) Prepare(_ context.Context, c *Cluster) (NodeSetup, error) {
	var err error
	if c.Dir, err = os.MkdirTemp("", "dbkeeper-cluster-"); err != nil {
		return NodeSetup{}, fmt.Errorf("creating the cluster directory: %w", err)
	}
	// envtest's default range is a /24: 254 Services. The benchmark makes
	// two Services per Database, for 1,000 Databases and their floor.
	c.env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", serviceRange)
	return NodeSetup{}, nil
}

// Start starts kwok and creates the Node it manages.
func (n fakeNode) Start(ctx context.Context, c *Cluster) error {
	if err := n.startKwok(c); err != nil {
		return err
	}
	return n.createNode(ctx, c)
}

// StopPods has nothing to do: no pod runs.
func (fakeNode) StopPods(*Cluster) error { return nil }

// Stop removes the cluster directory, unless kept.
func (fakeNode) Stop(c *Cluster) error {
	if c.Dir != "" && !c.keep {
		return os.RemoveAll(c.Dir)
	}
	return nil
}

// startKwok starts kwok with its shipped stages (pods become Ready) and
// ours (Job pods complete, or fail when labelled so).
func (fakeNode) startKwok(c *Cluster) error {
	kc := "--kubeconfig=" + c.Kubeconfig
	stages := []string{}
	shipped, err := filepath.Glob(filepath.Join(c.Bin, "kwok-stages", "*.yaml"))
	if err != nil || len(shipped) == 0 {
		return fmt.Errorf("no kwok stages in %s/kwok-stages (run `make tools`)", c.Bin)
	}
	for _, f := range shipped {
		stages = append(stages, "--config="+f)
	}
	own := filepath.Join(c.Dir, "job-outcome.yaml")
	if err := os.WriteFile(own, jobOutcomeStages, 0o600); err != nil {
		return fmt.Errorf("writing kwok stages: %w", err)
	}
	stages = append(stages, "--config="+own)

	c.say("starting kwok")
	return c.run("kwok", append([]string{kc, "--manage-all-nodes=true", "--cidr=10.244.0.0/24", "--node-ip=10.244.0.1"}, stages...)...)
}

// createNode creates the Node kwok manages.
func (fakeNode) createNode(ctx context.Context, c *Cluster) error {
	if err := c.Client.Create(ctx, KwokNode(NodeName)); err != nil {
		return fmt.Errorf("creating node %s: %w", NodeName, err)
	}
	return nil
}

// KwokNode is a Node that kwok manages (it manages every node): a test
// of the fake-node cluster may create more, with room for any pod.
func KwokNode(name string) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("5000"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
			Labels: map[string]string{
				"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "type": "kwok",
			},
		},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
}
