package resources

import (
	"cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/engine"
)

const (
	// EngineContainer is the name of the engine pod's container that runs
	// the agent and the server.
	EngineContainer = "engine"
	// agentVolume is the emptyDir holding the agent's binary.
	agentVolume = "agent-bin"
)

// StatefulSet is the desired StatefulSet that runs the engine under the
// instance agent (copied from agentImage, the manager's own), requiring
// TLS on TCP connections when tls is on (see TLSFor).
//
// The agent is the engine container's PID 1 and owns the server: the
// container's command is `agent -- <the image's entrypoint>`, and its args
// are the server's as before. The kubelet probes the agent, not the
// server: readiness is the agent's ReadyPath (the server accepts
// connections, a standby included), liveness its HealthPath (the agent
// runs). So a long initdb, clone or crash recovery never fails liveness
// (it needed an hour-long startup probe on pg_isready before), and a
// server the agent restarts does not restart the pod.
//
// Rollouts are OnDelete: a changed template restarts no pod by itself;
// the replication controller deletes them in order (standbys, switchover,
// the former primary). Switching an existing StatefulSet to OnDelete in
// the same write as its new template restarts nothing either.
func StatefulSet(db *dbv1.Database, eng engine.Engine, tls ServerTLS, agentImage string) (*appsv1ac.StatefulSetApplyConfiguration, error) {
	return UpgradingStatefulSet(db, eng, tls, agentImage, nil)
}

// UpgradingStatefulSet is StatefulSet whose pods upgrade their data
// directories in place from up.From (nil: none; MajorUpgradeOf).
func UpgradingStatefulSet(db *dbv1.Database, eng engine.Engine, tls ServerTLS, agentImage string, up *MajorUpgrade) (*appsv1ac.StatefulSetApplyConfiguration, error) {
	image, err := engine.ImageFor(eng, db)
	if err != nil {
		return nil, err
	}
	podLabels := PodSelectorLabels(db)
	for k, v := range Labels(db, ComponentDatabase) {
		podLabels[k] = v
	}

	spread, err := topologySpread(db)
	if err != nil {
		return nil, err
	}

	container := corev1ac.Container().
		WithName(EngineContainer).
		WithImage(image).
		WithCommand(append([]string{agentapi.Binary, "agent", "--"}, eng.Entrypoint()...)...).
		WithArgs(eng.ServerArgs()...).
		WithPorts(
			corev1ac.ContainerPort().WithName(eng.PortName()).WithContainerPort(eng.Port()).WithProtocol(corev1.ProtocolTCP),
			corev1ac.ContainerPort().WithName(agentapi.PortName).WithContainerPort(agentapi.Port).WithProtocol(corev1.ProtocolTCP)).
		WithEnv(envApply(eng.Env(SuperuserSecretName(db)))...).
		WithEnv(envApply(agentEnv(db, tls))...).
		WithResources(resourcesApply(db.Spec.Resources)).
		WithReadinessProbe(readinessProbe()).
		WithLivenessProbe(agentProbe(agentapi.HealthPath, 6)).
		WithSecurityContext(restrictedContainer(eng.User())).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName(DataVolumeName).WithMountPath(eng.DataMountPath()),
			// writable: the agent receives a new build of itself there and
			// renames it into place (docs/design/upgrades.md)
			corev1ac.VolumeMount().WithName(agentVolume).WithMountPath(agentapi.BinDir))

	// The agent reads and renews the primary Lease with the pod's
	// ServiceAccount token (InstanceRole: that one Lease, nothing else).
	pod := corev1ac.PodSpec().
		WithEnableServiceLinks(false).
		WithServiceAccountName(InstanceServiceAccountName(db)).
		WithAutomountServiceAccountToken(true).
		WithTerminationGracePeriodSeconds(60).
		WithSecurityContext(restrictedPod(eng.User())).
		WithAffinity(affinity(db)).
		WithTopologySpreadConstraints(spread...).
		WithTolerations(tolerations(db)...).
		WithNodeSelector(db.Spec.NodeSelector).
		WithVolumes(corev1ac.Volume().WithName(agentVolume).WithEmptyDir(corev1ac.EmptyDirVolumeSource())).
		WithInitContainers(agentCopy(agentImage, eng.User()))
	if db.Spec.PriorityClassName != "" {
		pod.WithPriorityClassName(db.Spec.PriorityClassName)
	}
	addScratch(pod, container, eng.ScratchMounts())
	addSharedMemory(pod, container, eng.SharedMemoryPath(), db.Spec.Resources)
	if tls {
		addServerTLS(db, eng, pod, container)
	} else {
		addAgentTLS(db, pod, container)
	}
	if err := addRepository(db, tls, pod, container); err != nil {
		return nil, err
	}
	addBackupServer(db, tls, container)
	addCustomQueries(db, pod, container)
	addMajorUpgrade(db, eng, up, pod, container)
	pod.WithContainers(container)

	template, err := podTemplate(db, podLabels, pod)
	if err != nil {
		return nil, err
	}
	return appsv1ac.StatefulSet(StatefulSetName(db), db.Namespace).
		WithLabels(Labels(db, ComponentDatabase)).
		WithAnnotations(upgradeAnnotations(db, up)).
		WithOwnerReferences(OwnerReference(db)).
		WithSpec(appsv1ac.StatefulSetSpec().
			WithReplicas(Instances(db)).
			WithServiceName(HeadlessServiceName(db)).
			WithPodManagementPolicy(appsv1.OrderedReadyPodManagement).
			WithUpdateStrategy(appsv1ac.StatefulSetUpdateStrategy().WithType(appsv1.OnDeleteStatefulSetStrategyType)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(PodSelectorLabels(db))).
			WithTemplate(template).
			WithVolumeClaimTemplates(DataVolumeClaimTemplate(db))), nil
}

// AnnotationRestartRevision on the pods' template is
// status.configuration.restartRevision: a new value of a parameter that
// PostgreSQL applies only at a start changes the template, and the
// instances restart in the usual order (standbys, one switchover, the
// former primary).
const AnnotationRestartRevision = "database.dbkeeper.io/restart-revision"

// podTemplate is the pods' template: their labels, the restart revision of
// the Database's parameters when there is one, the restart hash
// (RestartHash), and spec.
func podTemplate(db *dbv1.Database, labels map[string]string, spec *corev1ac.PodSpecApplyConfiguration) (*corev1ac.PodTemplateSpecApplyConfiguration, error) {
	t := corev1ac.PodTemplateSpec().WithLabels(labels).WithSpec(spec)
	revision := ""
	if c := db.Status.Configuration; c != nil && c.RestartRevision != "" {
		revision = c.RestartRevision
		t.WithAnnotations(map[string]string{AnnotationRestartRevision: revision})
	}
	hash, err := RestartHash(spec, revision)
	if err != nil {
		return nil, err
	}
	return t.WithAnnotations(map[string]string{AnnotationRestartHash: hash}), nil
}

// customQueriesVolume holds the ConfigMap of spec.monitoring.customQueries.
const customQueriesVolume = "custom-queries"

// addCustomQueries mounts the key of spec.monitoring.customQueries'
// ConfigMap where the agent reads it (agentapi.CustomQueriesDir), optional:
// a ConfigMap or a key that is missing leaves the file out (the agent then
// runs no query) rather than the pod unstarted.
func addCustomQueries(db *dbv1.Database, pod *corev1ac.PodSpecApplyConfiguration, c *corev1ac.ContainerApplyConfiguration) {
	q := db.Spec.Monitoring.CustomQueries
	if q == nil {
		return
	}
	pod.WithVolumes(corev1ac.Volume().WithName(customQueriesVolume).WithConfigMap(corev1ac.ConfigMapVolumeSource().
		WithName(q.ConfigMapName).
		WithOptional(true).
		WithItems(corev1ac.KeyToPath().WithKey(cmp.Or(q.Key, agentapi.CustomQueriesFile)).WithPath(agentapi.CustomQueriesFile))))
	c.WithVolumeMounts(corev1ac.VolumeMount().WithName(customQueriesVolume).WithMountPath(agentapi.CustomQueriesDir).WithReadOnly(true))
}
