package resources

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	batchv1ac "k8s.io/client-go/applyconfigurations/batch/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/engine"
)

// ComponentVerification labels a Database's verification Job and its pod.
const ComponentVerification = "backup-verification"

// VerificationContainer is the verification pod's container.
const VerificationContainer = "verify"

// AnnotationVerificationID, on a verification Job, is the
// status.backup.lastVerification.id it runs for.
const AnnotationVerificationID = "database.dbkeeper.io/verification-id"

// verificationMountPath is the scratch volume the backup is restored into.
const verificationMountPath = "/verify"

// VerificationJobName is the name of the Database's verification Job (one
// at a time).
func VerificationJobName(db *dbv1.Database) string { return db.Name + "-verify" }

// VerificationTimeout is spec.backup.verification.timeout (2 hours when
// unset).
func VerificationTimeout(db *dbv1.Database) time.Duration {
	if v := db.Spec.Backup.Verification; v != nil && v.Timeout != nil && v.Timeout.Duration > 0 {
		return v.Timeout.Duration
	}
	return 2 * time.Hour
}

// VerificationSchedule is spec.backup.verification.schedule (Sundays at
// 05:00 when unset).
func VerificationSchedule(db *dbv1.Database) string {
	if v := db.Spec.Backup.Verification; v != nil && v.Schedule != "" {
		return v.Schedule
	}
	return "0 5 * * 0"
}

// VerificationJob restores db's newest base backup into a throwaway pod
// and checks it (`manager verify-backup`, agent.Verify): the engine's
// image with the agent copied in, as the instances run it, the object
// store's Secrets mounted as files, the backup restored into an emptyDir
// of spec.backup.verification.scratchSize (default spec.storage.size). The
// pod has no ServiceAccount token and its server takes no network
// connection; it runs once (no retry: a failure is what it reports) within
// spec.backup.verification.timeout, and writes its agentapi.VerifyReport to
// its termination message. id is status.backup.lastVerification.id.
func VerificationJob(db *dbv1.Database, eng engine.Engine, tls ServerTLS, agentImage, id string) (*batchv1ac.JobApplyConfiguration, error) {
	image, err := engine.ImageFor(eng, db)
	if err != nil {
		return nil, err
	}
	spec := db.Spec.Backup.Verification
	if spec == nil {
		spec = &dbv1.BackupVerificationSpec{}
	}
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
	}
	if spec.Resources != nil {
		res = *spec.Resources
	}
	scratch := db.Spec.DataSize()
	if spec.ScratchSize != nil {
		scratch = *spec.ScratchSize
	}
	timeout := VerificationTimeout(db)
	// not the password nor the host: the server is local and trusts its
	// socket.
	env := eng.VerificationEnv(SuperuserSecretName(db), CredentialsSecretName(db))
	env = append(env, corev1.EnvVar{Name: "PGDATA", Value: verificationMountPath + "/pgdata"})

	container := corev1ac.Container().
		WithName(VerificationContainer).
		WithImage(image).
		WithCommand(agentapi.Binary, agentapi.VerifyCommand, "--timeout="+timeout.String()).
		WithEnv(envApply(env)...).
		WithResources(resourcesApply(res)).
		WithSecurityContext(restrictedContainer(eng.User())).
		WithTerminationMessagePolicy(corev1.TerminationMessageReadFile).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName("verify").WithMountPath(verificationMountPath),
			corev1ac.VolumeMount().WithName(agentVolume).WithMountPath(agentapi.BinDir).WithReadOnly(true))
	pod := corev1ac.PodSpec().
		WithRestartPolicy(corev1.RestartPolicyNever).
		WithEnableServiceLinks(false).
		WithAutomountServiceAccountToken(false).
		WithSecurityContext(restrictedPod(eng.User())).
		WithVolumes(
			corev1ac.Volume().WithName(agentVolume).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
			corev1ac.Volume().WithName("verify").WithEmptyDir(corev1ac.EmptyDirVolumeSource().WithSizeLimit(scratch))).
		WithInitContainers(agentCopy(agentImage, eng.User()))
	addScratch(pod, container, eng.ScratchMounts())
	addSharedMemory(pod, container, eng.SharedMemoryPath(), res)
	if err := addRepository(db, tls, pod, container); err != nil {
		return nil, err
	}
	pod.WithContainers(container)

	labels := Labels(db, ComponentVerification)
	return batchv1ac.Job(VerificationJobName(db), db.Namespace).
		WithLabels(labels).
		WithAnnotations(map[string]string{AnnotationVerificationID: id}).
		WithOwnerReferences(OwnerReference(db)).
		WithSpec(batchv1ac.JobSpec().
			WithBackoffLimit(0).
			// the pod's own timeout reports first; the deadline catches a
			// pod that never started.
			WithActiveDeadlineSeconds(int64((timeout + 10*time.Minute) / time.Second)).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(labels).
				WithSpec(pod))), nil
}
