package faults

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDescendants: a process's children and grandchildren are found, and
// nothing else.
func TestDescendants(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	require.Eventually(t, func() bool { return len(Descendants(cmd.Process.Pid)) == 1 }, 5*time.Second, 20*time.Millisecond)
	sleep := Descendants(cmd.Process.Pid)[0]
	assert.Contains(t, Cmdline(sleep), "sleep 30")
	assert.Contains(t, Descendants(os.Getpid()), sleep, "a grandchild")
	assert.NotContains(t, Descendants(cmd.Process.Pid), cmd.Process.Pid)
	t.Cleanup(func() { _ = syscall.Kill(sleep, syscall.SIGKILL) })
}

// TestContainerID: the ID of the container of the Injector's name, and
// why there is none.
func TestContainerID(t *testing.T) {
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pg-1"}, Status: corev1.PodStatus{
		ContainerStatuses: []corev1.ContainerStatus{
			{Name: EngineContainer, ContainerID: "containerd://abc", State: running},
			{Name: "postgres", ContainerID: "containerd://def", State: running},
			{Name: "stopped", ContainerID: "containerd://ghi"},
		},
	}}
	id, err := containerID(pod, New(nil).container)
	require.NoError(t, err)
	assert.Equal(t, "abc", id)
	id, err = containerID(pod, New(nil).ForContainer("postgres").container)
	require.NoError(t, err)
	assert.Equal(t, "def", id)
	_, err = containerID(pod, "stopped")
	assert.ErrorContains(t, err, "not running")
	_, err = containerID(pod, "absent")
	assert.ErrorContains(t, err, "no absent container status")
}
