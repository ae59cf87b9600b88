package resources

import (
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/engine"
)

// The StatefulSet's annotations of in-place major upgrades
// (docs/design/major-upgrades.md).
const (
	// AnnotationEngineVersion is the major (spec.version) the StatefulSet's
	// template runs. A Database whose spec.version is above it upgrades in
	// place.
	AnnotationEngineVersion = "database.dbkeeper.io/engine-version"
	// AnnotationUpgradeFrom is the major the pods' data directories are
	// upgraded from while the template carries that upgrade.
	AnnotationUpgradeFrom = "database.dbkeeper.io/upgrade-from"
)

// OldEngineContainer is the init container of an in-place major upgrade:
// the old major's image, copying its server into the pod.
const OldEngineContainer = "old-engine"

// oldEngineVolume is the emptyDir it copies into.
const oldEngineVolume = "old-engine"

// MajorUpgrade is an in-place major upgrade the pods' template carries:
// the major the data directories are of, and the image that runs it.
type MajorUpgrade struct {
	From      string
	FromImage string
}

// MajorUpgradeOf is the in-place major upgrade the StatefulSet must carry,
// nil for none: a spec.version above the one live runs
// (AnnotationEngineVersion) starts one from the live major and image; a
// template that carries one keeps it while spec.version stays (its init
// container copies nothing once a data directory is of the new major, and
// taking it out would restart every pod). A StatefulSet made before the
// annotation runs spec.version.
func MajorUpgradeOf(db *dbv1.Database, live *appsv1.StatefulSet) *MajorUpgrade {
	if live == nil {
		return nil
	}
	running := live.Annotations[AnnotationEngineVersion]
	if running != "" && running != db.Spec.Version && upgradable(running, db.Spec.Version) {
		for _, c := range live.Spec.Template.Spec.Containers {
			if c.Name == EngineContainer {
				return &MajorUpgrade{From: running, FromImage: c.Image}
			}
		}
		return nil
	}
	from := live.Annotations[AnnotationUpgradeFrom]
	if from == "" || running != db.Spec.Version {
		return nil
	}
	for _, c := range live.Spec.Template.Spec.InitContainers {
		if c.Name == OldEngineContainer {
			return &MajorUpgrade{From: from, FromImage: c.Image}
		}
	}
	return nil
}

// upgradable says whether to is a later major than from.
func upgradable(from, to string) bool {
	f, err1 := strconv.Atoi(from)
	t, err2 := strconv.Atoi(to)
	return err1 == nil && err2 == nil && t > f
}

// upgradeAnnotations are the StatefulSet's annotations of the major its
// template runs and the upgrade it carries.
func upgradeAnnotations(db *dbv1.Database, up *MajorUpgrade) map[string]string {
	a := map[string]string{AnnotationEngineVersion: db.Spec.Version}
	if up != nil {
		a[AnnotationUpgradeFrom] = up.From
	}
	return a
}

// addMajorUpgrade adds up to the pod: the init container that copies the
// old major's server into an emptyDir (`manager copy-engine`, the agent
// copied by the first init container, run in the old image), mounted
// read-only in the engine container, whose agent is told both majors.
func addMajorUpgrade(db *dbv1.Database, eng engine.Engine, up *MajorUpgrade, pod *corev1ac.PodSpecApplyConfiguration, c *corev1ac.ContainerApplyConfiguration) {
	if up == nil {
		return
	}
	pgdata := ""
	for _, e := range eng.Env(SuperuserSecretName(db)) {
		if e.Name == "PGDATA" {
			pgdata = e.Value
		}
	}
	pod.WithVolumes(corev1ac.Volume().WithName(oldEngineVolume).WithEmptyDir(corev1ac.EmptyDirVolumeSource()))
	pod.WithInitContainers(corev1ac.Container().
		WithName(OldEngineContainer).
		WithImage(up.FromImage).
		WithCommand(agentapi.Binary, agentapi.CopyEngineCommand, up.From, agentapi.OldEngineDir).
		WithEnv(corev1ac.EnvVar().WithName("PGDATA").WithValue(pgdata)).
		WithResources(corev1ac.ResourceRequirements().
			WithRequests(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")}).
			WithLimits(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")})).
		WithSecurityContext(restrictedContainer(eng.User())).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName(agentVolume).WithMountPath(agentapi.BinDir).WithReadOnly(true),
			corev1ac.VolumeMount().WithName(oldEngineVolume).WithMountPath(agentapi.OldEngineDir),
			corev1ac.VolumeMount().WithName(DataVolumeName).WithMountPath(eng.DataMountPath()).WithReadOnly(true)))
	c.WithEnv(
		corev1ac.EnvVar().WithName(agentapi.EnvUpgradeFrom).WithValue(up.From),
		corev1ac.EnvVar().WithName(agentapi.EnvUpgradeTo).WithValue(db.Spec.Version))
	c.WithVolumeMounts(corev1ac.VolumeMount().WithName(oldEngineVolume).WithMountPath(agentapi.OldEngineDir).WithReadOnly(true))
}
