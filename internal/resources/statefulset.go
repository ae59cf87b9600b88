package resources

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
)

const engineContainer = "engine"

// StatefulSet is the desired StatefulSet that runs the engine, requiring
// TLS on TCP connections when tls is on (see TLSFor).
func StatefulSet(db *dbv1.Database, eng engine.Engine, tls ServerTLS) (*appsv1ac.StatefulSetApplyConfiguration, error) {
	image, err := engine.ImageFor(eng, db)
	if err != nil {
		return nil, err
	}
	podLabels := PodSelectorLabels(db)
	for k, v := range Labels(db, ComponentDatabase) {
		podLabels[k] = v
	}

	container := corev1ac.Container().
		WithName(engineContainer).
		WithImage(image).
		WithPorts(corev1ac.ContainerPort().WithName(eng.PortName()).WithContainerPort(eng.Port()).WithProtocol(corev1.ProtocolTCP)).
		WithEnv(envApply(eng.Env(SuperuserSecretName(db)))...).
		WithResources(resourcesApply(db.Spec.Resources)).
		WithStartupProbe(probeApply(eng.StartupProbe())).
		WithReadinessProbe(probeApply(eng.ReadinessProbe())).
		WithLivenessProbe(probeApply(eng.LivenessProbe())).
		WithSecurityContext(restrictedContainer(eng.User())).
		WithVolumeMounts(corev1ac.VolumeMount().WithName(DataVolumeName).WithMountPath(eng.DataMountPath()))

	pod := corev1ac.PodSpec().
		WithEnableServiceLinks(false).
		WithAutomountServiceAccountToken(false).
		WithTerminationGracePeriodSeconds(60).
		WithSecurityContext(restrictedPod(eng.User()))
	addScratch(pod, container, eng.ScratchMounts())
	addSharedMemory(pod, container, eng.SharedMemoryPath(), db.Spec.Resources)
	if tls {
		addServerTLS(db, eng, pod, container)
	}
	pod.WithContainers(container)

	return appsv1ac.StatefulSet(StatefulSetName(db), db.Namespace).
		WithLabels(Labels(db, ComponentDatabase)).
		WithOwnerReferences(OwnerReference(db)).
		WithSpec(appsv1ac.StatefulSetSpec().
			WithReplicas(Instances(db)).
			WithServiceName(HeadlessServiceName(db)).
			WithPodManagementPolicy(appsv1.OrderedReadyPodManagement).
			WithUpdateStrategy(appsv1ac.StatefulSetUpdateStrategy().WithType(appsv1.RollingUpdateStatefulSetStrategyType)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(PodSelectorLabels(db))).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(podLabels).
				WithSpec(pod)).
			WithVolumeClaimTemplates(DataVolumeClaimTemplate(db))), nil
}

// MaxInstances is the most engine instances a Database runs. Until
// streaming replication exists each instance would be an independent server
// behind the one client Service, splitting the data, so it is one; the CRD
// refuses spec.replicas above it, and a Database stored with more before
// that rule runs this many.
const MaxInstances int32 = 1

// Instances is the number of engine pods the Database runs: spec.replicas
// (default 1), capped at MaxInstances.
func Instances(db *dbv1.Database) int32 {
	return min(ptr.Deref(db.Spec.Replicas, 1), MaxInstances)
}

// DataVolumeClaimTemplate is the claim template of the data volumes.
// StatefulSets never change their claim templates, so a grown
// spec.storage.size reaches the PVCs through DataVolumeClaimSize instead.
func DataVolumeClaimTemplate(db *dbv1.Database) *corev1ac.PersistentVolumeClaimApplyConfiguration {
	spec := corev1ac.PersistentVolumeClaimSpec().
		WithAccessModes(corev1.ReadWriteOnce).
		WithResources(corev1ac.VolumeResourceRequirements().
			WithRequests(corev1.ResourceList{corev1.ResourceStorage: db.Spec.DataSize()}))
	if db.Spec.Storage.StorageClassName != nil {
		spec.WithStorageClassName(*db.Spec.Storage.StorageClassName)
	}
	// No kind, apiVersion or namespace: the API server stores templates
	// without them.
	claim := &corev1ac.PersistentVolumeClaimApplyConfiguration{}
	return claim.WithName(DataVolumeName).
		WithLabels(Labels(db, ComponentDatabase)).
		WithSpec(spec)
}

// PinClaimTemplate keeps the claim template of an existing StatefulSet,
// whose templates the API server never lets change, in the desired one.
func PinClaimTemplate(desired *appsv1ac.StatefulSetApplyConfiguration, live *appsv1.StatefulSet) {
	if live == nil || len(live.Spec.VolumeClaimTemplates) == 0 {
		return
	}
	for i := range desired.Spec.VolumeClaimTemplates {
		t := &desired.Spec.VolumeClaimTemplates[i]
		for _, l := range live.Spec.VolumeClaimTemplates {
			if t.Name != nil && l.Name == *t.Name {
				t.Spec.Resources.Requests = &l.Spec.Resources.Requests
			}
		}
	}
}

// PinLegacyEnv keeps, in the desired StatefulSet, the initdb-only
// environment (engine.LegacyEnvPrefix: POSTGRES_USER, POSTGRES_PASSWORD,
// POSTGRES_DB) of an existing StatefulSet made before issue 17, which read
// the application's credentials Secret: initdb has run, the image never
// reads them again, and changing them would restart every pod of every
// existing Database on upgrade for nothing
// (docs/design/roles-and-rotation.md, D6). The other variables are the
// desired ones, in the live order. A StatefulSet whose POSTGRES_USER
// already reads the desired Secret, or none at all, is left as desired.
func PinLegacyEnv(desired *appsv1ac.StatefulSetApplyConfiguration, live *appsv1.StatefulSet) {
	if live == nil || desired.Spec == nil || desired.Spec.Template == nil || desired.Spec.Template.Spec == nil {
		return
	}
	var liveEnv []corev1.EnvVar
	for _, c := range live.Spec.Template.Spec.Containers {
		if c.Name == engineContainer {
			liveEnv = c.Env
		}
	}
	var want *corev1ac.ContainerApplyConfiguration
	for i := range desired.Spec.Template.Spec.Containers {
		if c := &desired.Spec.Template.Spec.Containers[i]; c.Name != nil && *c.Name == engineContainer {
			want = c
		}
	}
	if want == nil || !legacyEnv(liveEnv, want.Env) {
		return
	}
	byName := map[string]corev1ac.EnvVarApplyConfiguration{}
	for _, e := range want.Env {
		byName[ptr.Deref(e.Name, "")] = e
	}
	pinned := make([]corev1ac.EnvVarApplyConfiguration, 0, len(liveEnv)+len(want.Env))
	for _, e := range liveEnv {
		switch d, ok := byName[e.Name]; {
		case strings.HasPrefix(e.Name, engine.LegacyEnvPrefix):
			pinned = append(pinned, *envApply([]corev1.EnvVar{e})[0])
		case ok:
			pinned = append(pinned, d)
		default:
			continue
		}
		delete(byName, e.Name)
	}
	for _, e := range want.Env {
		if _, left := byName[ptr.Deref(e.Name, "")]; left {
			pinned = append(pinned, e)
		}
	}
	want.Env = pinned
}

// legacyEnv says whether the live environment's POSTGRES_USER reads
// another Secret than the desired one's.
func legacyEnv(live []corev1.EnvVar, desired []corev1ac.EnvVarApplyConfiguration) bool {
	const user = engine.LegacyEnvPrefix + "USER"
	var liveSecret, wantSecret string
	for _, e := range live {
		if e.Name == user && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			liveSecret = e.ValueFrom.SecretKeyRef.Name
		}
	}
	for _, e := range desired {
		if ptr.Deref(e.Name, "") == user && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			wantSecret = ptr.Deref(e.ValueFrom.SecretKeyRef.Name, "")
		}
	}
	return liveSecret != "" && liveSecret != wantSecret
}

// DataPVCName is the name of the data PVC of one replica.
func DataPVCName(db *dbv1.Database, ordinal int) string {
	return fmt.Sprintf("%s-%s-%d", DataVolumeName, StatefulSetName(db), ordinal)
}
