package statefulset

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// imageFix says which Database field to change for the engine's image,
// which must be need (empty: an image that can be pulled): spec.image when
// it is set. Otherwise the image is the catalog's for spec.version, which
// is immutable, so the fix is to set spec.image (to a mirror, say), or the
// manager's catalog, which the cluster's admin sets.
func imageFix(db *dbv1.Database, need string) string {
	if db.Spec.Image != "" {
		if need == "" {
			return "fix spec.image"
		}
		return "fix spec.image: it must be " + need
	}
	if need == "" {
		need = "an image that can be pulled"
	}
	return fmt.Sprintf("set spec.image to %s (spec.image is empty, so the image is the manager's catalog image for %s %s, which %s and %s set)",
		need, db.Spec.Engine, db.Spec.Version, engine.RegistryFlag, engine.ImagesFlag)
}

// runnableImage is what the engine's image must be when the runtime cannot
// start it.
func runnableImage(db *dbv1.Database) string {
	return fmt.Sprintf("a %s image that runs on the node", db.Spec.Engine)
}

// configFix says what to fix when the kubelet cannot build the container:
// a Secret or a key missing means the superuser Secret, which the engine
// pod reads, or, in a StatefulSet made before issue 17, the credentials
// Secret.
func configFix(db *dbv1.Database, kubeletMessage string) string {
	if !strings.Contains(strings.ToLower(kubeletMessage), "secret") {
		return "the kubelet's message says what the pod lacks"
	}
	keys := fmt.Sprintf("keys %q and %q", engine.UsernameKey, engine.PasswordKey)
	if super := resources.SuperuserSecretName(db); strings.Contains(kubeletMessage, super) {
		return fmt.Sprintf("the superuser Secret %s, which dbkeeper generates once the credentials Secret is in order (see the CredentialsReady condition), "+
			"must exist and hold the %s", super, keys)
	}
	if resources.UserSecret(db) {
		return fmt.Sprintf("fix spec.credentials.secretName: Secret %s must exist in namespace %s and hold the %s",
			db.Spec.Credentials.SecretName, db.Namespace, keys)
	}
	return fmt.Sprintf("the generated Secret %s must hold the %s (see the CredentialsReady condition), "+
		"or set spec.credentials.secretName to a Secret that does", resources.GeneratedSecretName(db), keys)
}

// memoryLimit describes the container's memory limit.
func memoryLimit(pod *corev1.Pod, container string) string {
	if q, ok := containerLimits(pod, container)[corev1.ResourceMemory]; ok {
		return "memory limit " + q.String()
	}
	return "no memory limit"
}

// memoryFix is what to change after an OOM kill: the limit, or without
// one, the request that makes the scheduler keep memory free for it.
func memoryFix(pod *corev1.Pod, container string) string {
	if _, ok := containerLimits(pod, container)[corev1.ResourceMemory]; ok {
		return "raise spec.resources.limits.memory"
	}
	return "the node ran out of memory: set spec.resources.requests.memory (and limits.memory) to what the engine needs"
}

// containerLimits are the limits of the named container of the pod.
func containerLimits(pod *corev1.Pod, container string) corev1.ResourceList {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if c.Name == container {
				return c.Resources.Limits
			}
		}
	}
	return nil
}
