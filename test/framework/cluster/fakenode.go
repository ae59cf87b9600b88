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

// startKwok starts kwok with its shipped stages (pods become Ready) and
// ours (Job pods complete, or fail when labelled so).
func (c *Cluster) startKwok() error {
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

// createFakeNode creates the Node kwok manages.
func (c *Cluster) createFakeNode(ctx context.Context) error {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("5000"),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        NodeName,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
			Labels: map[string]string{
				"kubernetes.io/hostname": NodeName, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "type": "kwok",
			},
		},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
	if err := c.Client.Create(ctx, node); err != nil {
		return fmt.Errorf("creating node %s: %w", NodeName, err)
	}
	return nil
}
