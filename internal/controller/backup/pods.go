package backup

import (
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/jobs"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// runningJobRecheck is how often the pods of running backup and restore
// Jobs are looked at: a container that cannot start changes neither its Job
// nor anything else the controller watches.
const runningJobRecheck = 10 * time.Second

// notStarting are the reasons a container waits with that need someone to
// act (a Secret or key created, the image fixed): the kubelet retries, and
// the Job waits for its deadline meanwhile.
var notStarting = map[string]bool{
	"CreateContainerConfigError": true,
	"CreateContainerError":       true,
	"ErrImagePull":               true,
	"ImagePullBackOff":           true,
	"InvalidImageName":           true,
}

// podNotStarting looks at the pods (the backup component's, which inherit
// their Job's labels) of the Jobs that run (not finished, not being
// deleted), by the Job name label the Job controller adds. It returns
// BackupReady for the first pod, by name, that cannot start a container
// (nil if none), and whether any Job runs.
func podNotStarting(db *dbv1.Database, list []batchv1.Job, pods []corev1.Pod) (*metav1.Condition, bool) {
	running := map[string]bool{}
	for i := range list {
		if done, _, _, _ := jobs.Finished(&list[i]); !done && list[i].DeletionTimestamp == nil {
			running[list[i].Name] = true
		}
	}
	if len(running) == 0 {
		return nil, false
	}
	pods = slices.Clone(pods)
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for i := range pods {
		pod := &pods[i]
		job := pod.Labels[batchv1.JobNameLabel]
		if !running[job] {
			continue
		}
		if c := waitingContainer(pod); c != nil {
			kind := "backup"
			if job == resources.RestoreJobName(db) {
				kind = "restore"
			}
			cond := conditions.False(dbv1.ConditionBackupReady, dbv1.ReasonBackupPodNotStarting, fmt.Sprintf(
				"%s Job %s: pod %s cannot start container %s: %s: %s",
				kind, job, pod.Name, c.Name, c.State.Waiting.Reason, c.State.Waiting.Message))
			return &cond, true
		}
	}
	return nil, true
}

// waitingContainer is the first container of the pod, init containers
// first, that waits for a reason of notStarting, or nil.
func waitingContainer(pod *corev1.Pod) *corev1.ContainerStatus {
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for i := range statuses {
			if w := statuses[i].State.Waiting; w != nil && notStarting[w.Reason] {
				return &statuses[i]
			}
		}
	}
	return nil
}

// sooner is the shorter of two requeue delays, where 0 is none.
func sooner(a, b time.Duration) time.Duration {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}
