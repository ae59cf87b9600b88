package statefulset

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// enginePod is pod orders-0 of revision r2 with the engine container,
// limited to 64Mi, in the given state.
func enginePod(mutate func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-0",
			Labels: map[string]string{appsv1.ControllerRevisionHashLabelKey: "r2"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Image: "postgres:17",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}}}}},
		Status: corev1.PodStatus{
			Phase: corev1.PodPending,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.PodReady, Status: corev1.ConditionFalse},
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "engine", Image: "postgres:17"}},
		},
	}
	if mutate != nil {
		mutate(&p)
	}
	return p
}

func waiting(reason, message string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}
	}
}

func crashed(reason string, code int32, message string, restarts int32, now corev1.ContainerState) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		st := &p.Status.ContainerStatuses[0]
		st.State = now
		st.RestartCount = restarts
		st.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: reason, ExitCode: code, Message: message}}
		p.Status.Phase = corev1.PodRunning
	}
}

var backOff = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
	Message: "back-off 40s restarting failed container=engine pod=orders-0_shop(uid)"}}

// TestDiagnose turns the engine pods' statuses into StatefulSetReady when a
// pod shows why it is not ready, with a message that names the pod, the
// container, the kubelet's words and the Database field to fix.
func TestDiagnose(t *testing.T) {
	withImage := facettest.Database()
	withImage.Spec.Image = "registry.example/postgres:17-typo"
	userSecret := facettest.Database()
	userSecret.Spec.Credentials = &dbv1.CredentialsSpec{SecretName: "orders-admin"}
	dedicated := facettest.Database()
	dedicated.Spec.NodeSelector = map[string]string{"node-role.example.com/database": ""}

	cases := []struct {
		name   string
		db     *dbv1.Database
		pods   []corev1.Pod
		reason string // "" when nothing to act on shows: Progressing
		want   []string
	}{
		{"no pod yet", nil, nil, "", nil},
		{"ready", nil, []corev1.Pod{enginePod(func(p *corev1.Pod) {
			p.Status.Conditions[1].Status = corev1.ConditionTrue
			p.Status.ContainerStatuses[0].Ready = true
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
		})}, "", nil},
		{"container creating", nil, []corev1.Pod{enginePod(waiting("ContainerCreating", ""))}, "", nil},
		{"pod initializing", nil, []corev1.Pod{enginePod(waiting("PodInitializing", ""))}, "", nil},
		{"running, not ready yet", nil, []corev1.Pod{enginePod(func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
		})}, "", nil},
		{"image pull back-off, catalog image", nil,
			[]corev1.Pod{enginePod(waiting("ImagePullBackOff", `Back-off pulling image "postgres:17"`))},
			dbv1.ReasonImagePullFailed, []string{
				`pod orders-0: container engine cannot pull image "postgres:17": ImagePullBackOff: Back-off pulling image "postgres:17"; ` +
					`set spec.image to an image that can be pulled (spec.image is empty, so the image is the manager's catalog image for postgres 17, ` +
					`which --engine-registry and --engine-images set)`}},
		{"image pull error, spec.image", withImage,
			[]corev1.Pod{enginePod(func(p *corev1.Pod) {
				p.Spec.Containers[0].Image = withImage.Spec.Image
				waiting("ErrImagePull", "rpc error: code = NotFound desc = failed to pull and unpack image: not found")(p)
			})},
			dbv1.ReasonImagePullFailed, []string{
				`pod orders-0: container engine cannot pull image "registry.example/postgres:17-typo": ErrImagePull: rpc error: code = NotFound`,
				"; fix spec.image"}},
		{"agent image cannot be pulled", withImage, []corev1.Pod{enginePod(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: resources.AgentContainer, Image: "ghcr.io/dbkeeper/dbkeeper:typo"}}
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: resources.AgentContainer, Image: "ghcr.io/dbkeeper/dbkeeper:typo",
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image"}}}}
		})}, dbv1.ReasonImagePullFailed, []string{
			`pod orders-0: container agent-bin cannot pull image "ghcr.io/dbkeeper/dbkeeper:typo": ImagePullBackOff: Back-off pulling image; ` +
				"make the manager's --agent-image (the Helm chart's agentImage"}},
		{"invalid image name", withImage, []corev1.Pod{enginePod(waiting("InvalidImageName", `couldn't parse image name "POSTGRES"`))},
			dbv1.ReasonImagePullFailed, []string{"InvalidImageName: couldn't parse image name", "; fix spec.image"}},
		{"generated Secret lacks a key", nil,
			[]corev1.Pod{enginePod(waiting("CreateContainerConfigError", "couldn't find key password in Secret shop/orders-credentials"))},
			dbv1.ReasonContainerConfigError, []string{
				"pod orders-0: container engine cannot be created: CreateContainerConfigError: couldn't find key password in Secret shop/orders-credentials; ",
				`the generated Secret orders-credentials must hold the keys "username" and "password"`, "spec.credentials.secretName"}},
		{"superuser Secret missing", userSecret,
			[]corev1.Pod{enginePod(waiting("CreateContainerConfigError", `secret "orders-superuser" not found`))},
			dbv1.ReasonContainerConfigError, []string{
				`CreateContainerConfigError: secret "orders-superuser" not found; the superuser Secret orders-superuser, which dbkeeper generates once the credentials Secret is in order (see the CredentialsReady condition)`}},
		{"user Secret missing", userSecret,
			[]corev1.Pod{enginePod(waiting("CreateContainerConfigError", `secret "orders-admin" not found`))},
			dbv1.ReasonContainerConfigError, []string{
				`CreateContainerConfigError: secret "orders-admin" not found; fix spec.credentials.secretName: ` +
					`Secret orders-admin must exist in namespace shop and hold the keys "username" and "password"`}},
		{"create container error", nil,
			[]corev1.Pod{enginePod(waiting("CreateContainerError", "no command specified"))},
			dbv1.ReasonContainerStartFailed, []string{
				`pod orders-0: container engine cannot start image "postgres:17": CreateContainerError: no command specified; ` +
					"set spec.image to a postgres image that runs on the node (spec.image is empty"}},
		{"run container error", withImage, []corev1.Pod{enginePod(waiting("RunContainerError", "exec format error"))},
			dbv1.ReasonContainerStartFailed, []string{"RunContainerError: exec format error; fix spec.image: it must be a postgres image that runs on the node"}},
		{"start error, then back-off", nil,
			[]corev1.Pod{enginePod(crashed("StartError", 128, `exec: "postgres": executable file not found in $PATH`, 2, backOff))},
			dbv1.ReasonContainerStartFailed, []string{`cannot start image "postgres:17": StartError: exec: "postgres": executable file not found in $PATH, restarted 2 times; set spec.image`}},
		{"OOMKilled, in back-off", nil, []corev1.Pod{enginePod(crashed("OOMKilled", 137, "", 3, backOff))},
			dbv1.ReasonOutOfMemory, []string{
				"pod orders-0: container engine was OOMKilled (memory limit 64Mi), restarted 3 times; raise spec.resources.limits.memory"}},
		{"OOMKilled, running again: the same message", nil,
			[]corev1.Pod{enginePod(crashed("OOMKilled", 137, "", 3, corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}))},
			dbv1.ReasonOutOfMemory, []string{
				"pod orders-0: container engine was OOMKilled (memory limit 64Mi), restarted 3 times; raise spec.resources.limits.memory"}},
		{"OOMKilled long ago, started again, not ready now", nil,
			[]corev1.Pod{enginePod(func(p *corev1.Pod) {
				crashed("OOMKilled", 137, "", 1, corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})(p)
				p.Status.ContainerStatuses[0].Started = ptr.To(true)
			})}, "", nil},
		{"OOMKilled without a limit", nil, []corev1.Pod{enginePod(func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
			crashed("OOMKilled", 137, "", 1, backOff)(p)
		})}, dbv1.ReasonOutOfMemory, []string{"(no memory limit)", "set spec.resources.requests.memory"}},
		{"crash loop", nil,
			[]corev1.Pod{enginePod(crashed("Error", 1, "FATAL:  data directory \"/var/lib/postgresql/data\" has invalid permissions\n"+strings.Repeat("x", 300), 5, backOff))},
			dbv1.ReasonCrashLooping, []string{
				`pod orders-0: container engine exits with code 1, restarted 5 times: FATAL: data directory "/var/lib/postgresql/data" has invalid permissions xxx`,
				"…; see why with kubectl logs -n shop orders-0 -c engine --previous"}},
		{"crash loop without a message", nil, []corev1.Pod{enginePod(crashed("Completed", 0, "", 1, backOff))},
			dbv1.ReasonCrashLooping, []string{"container engine exits with code 0 (Completed), restarted once; see why"}},
		{"unschedulable for memory", nil, []corev1.Pod{enginePod(func(p *corev1.Pod) {
			p.Status.Conditions[0] = corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
				Message: "0/3 nodes are available: 3 Insufficient memory. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."}
			p.Status.ContainerStatuses = nil
		})}, dbv1.ReasonUnschedulable, []string{
			"pod orders-0 cannot be scheduled: 0/3 nodes are available: 3 Insufficient memory.",
			"; lower spec.resources.requests, or add nodes with room for them"}},
		{"unschedulable for a taint and a node selector", dedicated, []corev1.Pod{enginePod(func(p *corev1.Pod) {
			p.Status.Conditions[0] = corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
				Message: "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: db}, 2 node(s) didn't match Pod's node affinity/selector. " +
					"preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."}
			p.Status.ContainerStatuses = nil
		})}, dbv1.ReasonUnschedulable, []string{
			"pod orders-0 cannot be scheduled: 0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: db}, 2 node(s) didn't match Pod's node affinity/selector. " +
				"preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling; " +
				"if the tainted nodes are meant for the Database, tolerate their taint in spec.tolerations ({dedicated: db}); " +
				"fix spec.nodeSelector, or label the nodes meant for the Database: no other node matches"}},
		{"unschedulable for an unbound claim", nil, []corev1.Pod{enginePod(func(p *corev1.Pod) {
			p.Status.Conditions[0] = corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
				Message: "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."}
			p.Status.ContainerStatuses = nil
		})}, dbv1.ReasonUnschedulable, []string{"unbound immediate PersistentVolumeClaims", "check the data PVC data-orders-0: fix spec.storage"}},
		{"an older revision's stuck pod: delete it", withImage, []corev1.Pod{enginePod(func(p *corev1.Pod) {
			p.Labels[appsv1.ControllerRevisionHashLabelKey] = "r1"
			waiting("ImagePullBackOff", `Back-off pulling image "postgres:17"`)(p)
		})}, dbv1.ReasonImagePullFailed, []string{
			`cannot pull image "postgres:17"`,
			"; pod orders-0 was made from an older spec of the Database, and the StatefulSet does not replace a pod that never became ready: " +
				"once the spec is fixed, delete the pod (kubectl delete pod -n shop orders-0) to have it made again"}},
		{"a terminating pod is not diagnosed", nil, []corev1.Pod{enginePod(func(p *corev1.Pod) {
			p.DeletionTimestamp = ptr.To(metav1.Now())
			waiting("ImagePullBackOff", "")(p)
		})}, "", nil},
		{"the first stuck pod by name", nil, []corev1.Pod{
			enginePod(func(p *corev1.Pod) { p.Name = "orders-1"; waiting("ImagePullBackOff", "")(p) }),
			enginePod(waiting("CreateContainerConfigError", "secret not found")),
		}, dbv1.ReasonContainerConfigError, []string{"pod orders-0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := tc.db
			if db == nil {
				db = facettest.Database()
			}
			got, ok := diagnose(db, "r2", tc.pods)
			if tc.reason == "" {
				assert.False(t, ok, "diagnosed %+v", got)
				return
			}
			if !assert.True(t, ok) {
				return
			}
			assert.Equal(t, dbv1.ConditionStatefulSetReady, got.Type)
			assert.Equal(t, metav1.ConditionFalse, got.Status)
			assert.Equal(t, tc.reason, got.Reason)
			for _, w := range tc.want {
				assert.Contains(t, got.Message, w)
			}
			again, _ := diagnose(db, "r2", tc.pods)
			assert.Equal(t, got, again, "the message is stable")
		})
	}
}

// TestObserveDiagnoses: while replicas are not ready, the pods say why;
// right after a write, the pods are the old spec's and are not asked.
func TestObserveDiagnoses(t *testing.T) {
	db := facettest.Database()
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: 2}, Status: appsv1.StatefulSetStatus{
		ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 1, CurrentRevision: "r2", UpdateRevision: "r2"}}
	pods := []corev1.Pod{enginePod(waiting("ImagePullBackOff", ""))}

	got := observe(db, sts, false, pods, false)
	assert.Equal(t, dbv1.ReasonImagePullFailed, got.Reason)

	rolling := sts.DeepCopy()
	rolling.Status.UpdateRevision = "r3"
	got = observe(db, rolling, false, pods, false)
	assert.Equal(t, dbv1.ReasonImagePullFailed, got.Reason)
	assert.Contains(t, got.Message, "delete the pod")

	got = observe(db, sts, true, pods, false)
	assert.Equal(t, dbv1.ReasonProgressing, got.Reason)
	assert.Contains(t, got.Message, "updated the StatefulSet")
}
