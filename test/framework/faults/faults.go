// Package faults injects the faults of the failover tests into a real
// node's engine pods from the host (test/framework/realnode):
// signals to the processes of a pod's engine container (found through
// /proc, by the cgroup that names the pod and the container), an nftables
// table that cuts a pod off from the API server, a file that fills a
// pod's volume. Each reversible fault returns its undo; every host change
// it makes is undone by the cluster's teardown too (a killed test leaves
// no fault behind): fault tables carry realnode.FaultTablePrefix, filled
// volumes live under the cluster directory, and stopped processes die with
// the node.
//
// Whole nodes of a cluster of several real nodes (realnode.Options.Nodes)
// get theirs through Injector.Nodes (nodes.go, drain.go): power off and on
// (their freezer cgroup and their link), partitions from the other nodes
// or from the API server (tables in the node's network namespace, which
// goes with teardown), cordon and drain.
//
// Nothing here sends a packet: the network changes only drop packets.
package faults

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// EngineContainer is the name of the engine pods' container that runs the
// agent and PostgreSQL (internal/resources).
const EngineContainer = "engine"

// Injector injects faults into the pods the client reads.
type Injector struct {
	client client.Client
	// container is the name of the pods' container whose processes the
	// signals and Freeze act on.
	container string
}

// New returns an Injector that reads pods, claims and volumes through c
// and acts on the pods' EngineContainer.
func New(c client.Client) *Injector { return &Injector{client: c, container: EngineContainer} }

// ForContainer returns an Injector like i that acts on the pods'
// container named name instead of EngineContainer: another operator's
// database pods, whose PID 1 and its postgres child run in a container
// of another name (CloudNativePG's "postgres").
func (i *Injector) ForContainer(name string) *Injector {
	return &Injector{client: i.client, container: name}
}

// pod reads a pod as it is now.
func (i *Injector) pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	if err := i.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
		return nil, fmt.Errorf("getting pod %s/%s: %w", namespace, name, err)
	}
	return pod, nil
}

// containerID is the ID of the pod's running container name (without
// the runtime's "containerd://" prefix).
func containerID(pod *corev1.Pod, name string) (string, error) {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != name {
			continue
		}
		if cs.State.Running == nil || cs.ContainerID == "" {
			return "", fmt.Errorf("the %s container of pod %s/%s is not running", name, pod.Namespace, pod.Name)
		}
		_, id, _ := strings.Cut(cs.ContainerID, "://")
		return id, nil
	}
	return "", fmt.Errorf("pod %s/%s has no %s container status", pod.Namespace, pod.Name, name)
}
