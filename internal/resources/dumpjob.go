package resources

import (
	corev1 "k8s.io/api/core/v1"
	batchv1ac "k8s.io/client-go/applyconfigurations/batch/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
)

// dumpRun is what differs between the pod of a backup Job and that of a
// restore Job.
type dumpRun struct {
	// container is the name of the pod's one container.
	container string
	// command dumps into, or restores from, BackupMountPath.
	command []string
	// env is the container's environment: the server and the login.
	env []corev1.EnvVar
	// claim is the backup PVC mounted at BackupMountPath.
	claim string
	// readOnly mounts the backup volume read-only (a restore).
	readOnly bool
	// tls makes the client verify the server's certificate.
	tls ServerTLS
}

// dumpPodTemplate is the pod of a backup or restore Job: one container of
// the engine's image running the command with the Database's credentials,
// the backup volume at BackupMountPath, a scratch /tmp, the restricted
// security context, no service links and no service account token; it
// never restarts in place, and a failure leaves its last log lines as the
// container's termination message.
func dumpPodTemplate(db *dbv1.Database, eng engine.Engine, run dumpRun) (*corev1ac.PodTemplateSpecApplyConfiguration, error) {
	image, err := engine.ImageFor(eng, db)
	if err != nil {
		return nil, err
	}
	mount := corev1ac.VolumeMount().WithName(backupVolume).WithMountPath(BackupMountPath)
	claim := corev1ac.PersistentVolumeClaimVolumeSource().WithClaimName(run.claim)
	if run.readOnly {
		mount.WithReadOnly(true)
		claim.WithReadOnly(true)
	}
	container := corev1ac.Container().
		WithName(run.container).
		WithImage(image).
		WithCommand(run.command...).
		WithEnv(envApply(run.env)...).
		WithSecurityContext(restrictedContainer(eng.User())).
		WithVolumeMounts(mount).
		// a failed dump's last log lines become its termination message,
		// which the backup controller quotes in status.backup
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError)
	pod := corev1ac.PodSpec().
		WithRestartPolicy(corev1.RestartPolicyNever).
		WithEnableServiceLinks(false).
		WithAutomountServiceAccountToken(false).
		WithSecurityContext(restrictedPod(eng.User())).
		WithVolumes(corev1ac.Volume().WithName(backupVolume).WithPersistentVolumeClaim(claim))
	addScratch(pod, container, []string{"/tmp"})
	if run.tls {
		addClientTLS(db, eng, pod, container)
	}
	pod.WithContainers(container)
	return corev1ac.PodTemplateSpec().
		WithLabels(Labels(db, ComponentBackup)).
		WithSpec(pod), nil
}

// dumpJob is a Job of the Database's backup component, owned by it.
func dumpJob(db *dbv1.Database, name string, spec *batchv1ac.JobSpecApplyConfiguration) *batchv1ac.JobApplyConfiguration {
	return batchv1ac.Job(name, db.Namespace).
		WithLabels(Labels(db, ComponentBackup)).
		WithOwnerReferences(OwnerReference(db)).
		WithSpec(spec)
}
