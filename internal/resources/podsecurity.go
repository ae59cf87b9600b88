package resources

import (
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
)

// restrictedPod is the pod security context of every pod dbkeeper makes,
// running as uid, within the restricted Pod Security Standard.
func restrictedPod(uid int64) *corev1ac.PodSecurityContextApplyConfiguration {
	return corev1ac.PodSecurityContext().
		WithRunAsNonRoot(true).
		WithRunAsUser(uid).
		WithRunAsGroup(uid).
		WithFSGroup(uid).
		WithFSGroupChangePolicy(corev1.FSGroupChangeOnRootMismatch).
		WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))
}

// restrictedContainer is the security context of every container dbkeeper
// makes: uid, no privilege, no capability, a read-only root filesystem
// (see addScratch for the directories it writes).
func restrictedContainer(uid int64) *corev1ac.SecurityContextApplyConfiguration {
	return corev1ac.SecurityContext().
		WithRunAsNonRoot(true).
		WithRunAsUser(uid).
		WithRunAsGroup(uid).
		WithAllowPrivilegeEscalation(false).
		WithReadOnlyRootFilesystem(true).
		WithPrivileged(false).
		WithCapabilities(corev1ac.Capabilities().WithDrop(corev1.Capability("ALL"))).
		WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))
}

// addSharedMemory mounts a memory-backed emptyDir at dir (when the engine
// wants one), the size of the container's memory limit when it has one: the
// volume's pages count against that limit anyway. It must run before the
// container is added to the pod.
func addSharedMemory(pod *corev1ac.PodSpecApplyConfiguration, c *corev1ac.ContainerApplyConfiguration, dir string, res corev1.ResourceRequirements) {
	if dir == "" {
		return
	}
	const name = "shm"
	src := corev1ac.EmptyDirVolumeSource().WithMedium(corev1.StorageMediumMemory)
	if limit, ok := res.Limits[corev1.ResourceMemory]; ok {
		src.WithSizeLimit(limit)
	}
	pod.WithVolumes(corev1ac.Volume().WithName(name).WithEmptyDir(src))
	c.WithVolumeMounts(corev1ac.VolumeMount().WithName(name).WithMountPath(dir))
}

// addScratch gives the container an emptyDir for each writable directory it
// needs besides its volumes, because its root filesystem is read-only. It
// must run before the container is added to the pod, because
// WithContainers copies it.
func addScratch(pod *corev1ac.PodSpecApplyConfiguration, c *corev1ac.ContainerApplyConfiguration, dirs []string) {
	for _, dir := range dirs {
		name := "scratch-" + strings.ReplaceAll(strings.Trim(path.Clean(dir), "/"), "/", "-")
		pod.WithVolumes(corev1ac.Volume().WithName(name).WithEmptyDir(corev1ac.EmptyDirVolumeSource()))
		c.WithVolumeMounts(corev1ac.VolumeMount().WithName(name).WithMountPath(dir))
	}
}
