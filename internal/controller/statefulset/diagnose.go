package statefulset

import (
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// The kubelet's reasons for a container that waits and will not start
// without someone acting (ContainerCreating and PodInitializing are just
// progress).
var (
	imagePullReasons   = map[string]bool{"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true}
	startFailedReasons = map[string]bool{"CreateContainerError": true, "RunContainerError": true}
	// startFailedTerminations are the reasons of a last termination in
	// which the container never ran: the runtime could not start it
	// (containerd says StartError, Docker said ContainerCannotRun).
	startFailedTerminations = map[string]bool{"StartError": true, "ContainerCannotRun": true}
)

const (
	reasonConfigError = "CreateContainerConfigError"
	reasonOOMKilled   = "OOMKilled"
	// maxTerminationMessage bounds the part of a container's termination
	// message quoted in the condition.
	maxTerminationMessage = 200
)

// diagnose says why the engine pods are not ready, when a pod shows a
// reason that needs someone to act: an image that cannot be pulled, a
// container that cannot be configured or started, one killed for its
// memory, one that keeps crashing, a pod no node can take. It returns
// StatefulSetReady, False, for the first such pod by name, and false when
// no pod shows one (the pods are on their way: Progressing).
//
// updateRevision is the StatefulSet's status.updateRevision: a stuck pod of
// another revision was made from an older spec, and the StatefulSet does
// not replace a pod that never became ready (Kubernetes' "forced
// rollback"), so the message says to delete it rather than to fix the spec
// the user may already have fixed.
//
// The message is stable while the situation is: it holds no time and no
// counter the controller keeps, only what the kubelet writes into the pod's
// status. The kubelet changes those at its back-off's pace (10 s doubling
// to 5 min): a pull failure alternates ErrImagePull and ImagePullBackOff,
// and the restart count grows by one per crash. The condition is written at
// most once per such change, which is no hot loop, and the count tells a
// user whether the crashes go on; so it stays in the message.
func diagnose(db *dbv1.Database, updateRevision string, pods []corev1.Pod) (metav1.Condition, bool) {
	pods = slices.Clone(pods)
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil || podReady(pod) {
			continue
		}
		p, ok := podProblem(db, pod)
		if !ok {
			continue
		}
		fix := p.fix
		if rev := pod.Labels[appsv1.ControllerRevisionHashLabelKey]; rev != "" && updateRevision != "" && rev != updateRevision {
			fix = fmt.Sprintf("pod %s was made from an older spec of the Database, and the StatefulSet does not replace "+
				"a pod that never became ready: once the spec is fixed, delete the pod (kubectl delete pod -n %s %s) to have it made again",
				pod.Name, pod.Namespace, pod.Name)
		}
		return conditions.False(dbv1.ConditionStatefulSetReady, p.reason, p.what+"; "+fix), true
	}
	return metav1.Condition{}, false
}

// diagnosed are the reasons diagnose gives.
var diagnosed = map[string]bool{
	dbv1.ReasonImagePullFailed: true, dbv1.ReasonContainerConfigError: true, dbv1.ReasonContainerStartFailed: true,
	dbv1.ReasonOutOfMemory: true, dbv1.ReasonCrashLooping: true, dbv1.ReasonUnschedulable: true,
}

// recordDiagnosis records a Warning Event on the Database when diagnose
// gives a reason that StatefulSetReady, already False, did not have. The
// condition's Writer records an Event only when the condition's status
// changes, and Progressing becoming ImagePullFailed is no change of status,
// yet it is the news a user looks for in kubectl describe. The Event's
// reason is the condition's, so the events API counts repeats of one
// problem as one series.
func (s *syncer) recordDiagnosis(db *dbv1.Database, cond metav1.Condition) {
	prev := meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionStatefulSetReady)
	if !diagnosed[cond.Reason] || prev == nil || prev.Status != metav1.ConditionFalse || prev.Reason == cond.Reason {
		return
	}
	s.writer.Eventf(db, nil, corev1.EventTypeWarning, cond.Reason, "Diagnose", "%s is %s: %s",
		dbv1.ConditionStatefulSetReady, cond.Status, cond.Message)
}

// problem is what keeps a pod from running: the condition's reason, what
// the kubelet or the scheduler says, and what to do about it.
type problem struct {
	reason, what, fix string
}

// podProblem is what keeps one pod from running, when it is something to
// act on.
func podProblem(db *dbv1.Database, pod *corev1.Pod) (problem, bool) {
	if c := podCondition(pod, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
		return problem{dbv1.ReasonUnschedulable,
			fmt.Sprintf("pod %s cannot be scheduled: %s", pod.Name, sentence(c.Message)),
			unschedulableFix(db, c.Message)}, true
	}
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for i := range statuses {
			if p, ok := containerProblem(db, pod, &statuses[i]); ok {
				return p, true
			}
		}
	}
	return problem{}, false
}

// containerProblem is what keeps one container from running, when it is
// something to act on.
func containerProblem(db *dbv1.Database, pod *corev1.Pod, st *corev1.ContainerStatus) (problem, bool) {
	if st.Ready {
		return problem{}, false
	}
	image := containerImage(pod, st)
	if w := st.State.Waiting; w != nil {
		switch {
		case imagePullReasons[w.Reason]:
			fix := imageFix(db, "")
			if st.Name == resources.AgentContainer {
				// The manager's own image, not the Database's.
				fix = "make the manager's --agent-image (the Helm chart's agentImage, by default the manager's image) one the nodes can pull"
			}
			return problem{dbv1.ReasonImagePullFailed,
				fmt.Sprintf("pod %s: container %s cannot pull image %q: %s", pod.Name, st.Name, image, kubeletSays(w.Reason, w.Message)),
				fix}, true
		case w.Reason == reasonConfigError:
			return problem{dbv1.ReasonContainerConfigError,
				fmt.Sprintf("pod %s: container %s cannot be created: %s", pod.Name, st.Name, kubeletSays(w.Reason, w.Message)),
				configFix(db, w.Message)}, true
		case startFailedReasons[w.Reason]:
			return problem{dbv1.ReasonContainerStartFailed,
				fmt.Sprintf("pod %s: container %s cannot start image %q: %s", pod.Name, st.Name, image, kubeletSays(w.Reason, w.Message)),
				imageFix(db, runnableImage(db))}, true
		}
	}
	// A container that restarted and has not started again (its startup
	// probe has not passed) is between two crashes, waiting in
	// CrashLoopBackOff or running until the next: both are told by its
	// last termination, so the message does not change with each start.
	// One that started again is not crashing now, whatever it did before.
	last := st.LastTerminationState.Terminated
	if st.RestartCount == 0 || last == nil || (st.State.Running != nil && ptr.Deref(st.Started, false)) {
		return problem{}, false
	}
	switch {
	case last.Reason == reasonOOMKilled:
		return problem{dbv1.ReasonOutOfMemory,
			fmt.Sprintf("pod %s: container %s was OOMKilled (%s), restarted %s", pod.Name, st.Name, memoryLimit(pod, st.Name), times(st.RestartCount)),
			memoryFix(pod, st.Name)}, true
	case startFailedTerminations[last.Reason]:
		return problem{dbv1.ReasonContainerStartFailed,
			fmt.Sprintf("pod %s: container %s cannot start image %q: %s, restarted %s", pod.Name, st.Name, image, kubeletSays(last.Reason, last.Message), times(st.RestartCount)),
			imageFix(db, runnableImage(db))}, true
	}
	what := fmt.Sprintf("pod %s: container %s exits with code %d", pod.Name, st.Name, last.ExitCode)
	if last.Reason != "" && last.Reason != "Error" {
		what += " (" + last.Reason + ")"
	}
	what += ", restarted " + times(st.RestartCount)
	if m := conditions.Quote(last.Message, maxTerminationMessage); m != "" {
		what += ": " + m
	}
	return problem{dbv1.ReasonCrashLooping, what,
		fmt.Sprintf("see why with kubectl logs -n %s %s -c %s --previous", pod.Namespace, pod.Name, st.Name)}, true
}

// kubeletSays is the kubelet's reason and message, as one phrase.
func kubeletSays(reason, message string) string {
	if message = sentence(message); message == "" {
		return reason
	}
	return reason + ": " + message
}

// containerImage is the image the pod's spec gives the container: what
// the kubelet tries to pull, which may be an older spec's.
func containerImage(pod *corev1.Pod, st *corev1.ContainerStatus) string {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if c.Name == st.Name {
				return c.Image
			}
		}
	}
	return st.Image
}

// times is a count of restarts in words.
func times(n int32) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

// sentence is a message of the kubelet or the scheduler without the space
// and the full stop around it, to go before a semicolon.
func sentence(s string) string {
	return strings.TrimSuffix(strings.TrimSpace(s), ".")
}
