package backup

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
)

func TestWaitingContainer(t *testing.T) {
	waiting := func(name, reason string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}
	}
	running := corev1.ContainerStatus{Name: "backup", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	for name, tc := range map[string]struct {
		status corev1.PodStatus
		want   string
	}{
		"starting":          {corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{waiting("backup", "ContainerCreating")}}, ""},
		"running":           {corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{running}}, ""},
		"no status yet":     {corev1.PodStatus{}, ""},
		"config error":      {corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{waiting("backup", "CreateContainerConfigError")}}, "backup"},
		"image pull":        {corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{waiting("backup", "ImagePullBackOff")}}, "backup"},
		"init container":    {corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{waiting("init", "ErrImagePull")}, ContainerStatuses: []corev1.ContainerStatus{waiting("backup", "PodInitializing")}}, "init"},
		"invalid image":     {corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{waiting("backup", "InvalidImageName")}}, "backup"},
		"create error":      {corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{waiting("backup", "CreateContainerError")}}, "backup"},
		"crash loop is not": {corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{waiting("backup", "CrashLoopBackOff")}}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			c := waitingContainer(&corev1.Pod{Status: tc.status})
			if tc.want == "" {
				assert.Nil(t, c)
				return
			}
			if assert.NotNil(t, c) {
				assert.Equal(t, tc.want, c.Name)
			}
		})
	}
}

func TestSooner(t *testing.T) {
	assert.Equal(t, 10*time.Second, sooner(0, 10*time.Second))
	assert.Equal(t, 10*time.Second, sooner(time.Hour, 10*time.Second))
	assert.Equal(t, 5*time.Second, sooner(5*time.Second, 10*time.Second))
	assert.Equal(t, 5*time.Second, sooner(5*time.Second, 0))
}
