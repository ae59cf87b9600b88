package resources

import (
	"crypto/sha256"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	batchv1ac "k8s.io/client-go/applyconfigurations/batch/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
)

// BackupMountPath is where the backup PVC is mounted in backup Jobs.
const BackupMountPath = "/backups"

const (
	backupVolume    = "backups"
	backupContainer = "backup"
	// Bounded, so that a hung dump fails and is reported instead of
	// blocking every later schedule (concurrencyPolicy is Forbid).
	backupActiveDeadlineSeconds = 6 * 60 * 60
	backupStartingDeadline      = 30 * 60
	backupHistory               = 3
	// OnDemandBackupTTL is how long a finished on-demand backup Job (and
	// its pod, with the log) is kept before it is deleted: a day to read
	// it; its result stays in status.backup.
	OnDemandBackupTTL = 24 * 60 * 60
)

// BackupPVC is the volume that holds a Database's dumps. Unlike the other
// children it carries no owner reference: the Delete and Retain policies
// keep it, and garbage collection must not take it under any deletion
// propagation or with the cleanup controller off. The cleanup controller
// deletes it under WipeOut.
func BackupPVC(db *dbv1.Database) *corev1ac.PersistentVolumeClaimApplyConfiguration {
	spec := corev1ac.PersistentVolumeClaimSpec().
		WithAccessModes(corev1.ReadWriteOnce).
		WithResources(corev1ac.VolumeResourceRequirements().
			WithRequests(corev1.ResourceList{corev1.ResourceStorage: db.Spec.BackupSize()}))
	if db.Spec.Backup.Storage.StorageClassName != nil {
		spec.WithStorageClassName(*db.Spec.Backup.Storage.StorageClassName)
	}
	return corev1ac.PersistentVolumeClaim(BackupName(db), db.Namespace).
		WithLabels(Labels(db, ComponentBackup)).
		WithSpec(spec)
}

// BackupCronJob is the CronJob that dumps the database into the backup PVC
// on spec.backup.schedule with the engine's own dump tool, over the network
// through the client Service, verifying its certificate when tls is on.
// With spec.backup.objectStore the schedule takes base backups instead and
// the CronJob is kept suspended: its dumps stay in the volume for
// spec.bootstrap.fromBackup.
func BackupCronJob(db *dbv1.Database, eng engine.Engine, tls ServerTLS) (*batchv1ac.CronJobApplyConfiguration, error) {
	job, err := backupJobSpec(db, eng, tls)
	if err != nil {
		return nil, err
	}
	labels := Labels(db, ComponentBackup)
	cron := batchv1ac.CronJob(BackupName(db), db.Namespace).WithLabels(labels)
	if v := db.Spec.Backup.VolumeRepository; v != "" {
		// the setting in effect (resolved by VolumeRepositoryFor), kept
		// for it to read back.
		cron.WithAnnotations(map[string]string{AnnotationVolumeRepository: v})
	}
	return cron.
		WithOwnerReferences(OwnerReference(db)).
		WithSpec(batchv1ac.CronJobSpec().
			WithSchedule(db.Spec.Backup.Schedule).
			WithSuspend(db.Spec.Backup.Suspend || Store(db, tls) != nil).
			WithConcurrencyPolicy(batchv1.ForbidConcurrent).
			WithStartingDeadlineSeconds(backupStartingDeadline).
			WithSuccessfulJobsHistoryLimit(backupHistory).
			WithFailedJobsHistoryLimit(backupHistory).
			WithJobTemplate(batchv1ac.JobTemplateSpec().
				WithLabels(labels).
				WithSpec(job))), nil
}

// OnDemandBackupJobName is the name of the one Job a backup-now token runs:
// derived from the token, so that a token can never start two Jobs.
func OnDemandBackupJobName(db *dbv1.Database, token string) string {
	sum := sha256.Sum256([]byte(token))
	return fmt.Sprintf("%s-now-%x", db.Name, sum[:4])
}

// OnDemandBackupJob is the Job the backup-now annotation runs: the
// CronJob's job template, owned by the Database, with the token recorded,
// deleted OnDemandBackupTTL seconds after it finished (the CronJob's
// history limit does not reach it).
func OnDemandBackupJob(db *dbv1.Database, eng engine.Engine, tls ServerTLS, token string) (*batchv1ac.JobApplyConfiguration, error) {
	job, err := backupJob(db, eng, tls, OnDemandBackupJobName(db, token), map[string]string{dbv1.AnnotationBackupNow: token})
	if err != nil {
		return nil, err
	}
	job.Spec.WithTTLSecondsAfterFinished(OnDemandBackupTTL)
	return job, nil
}

// FinalBackupJobName is the name of the backup Job that
// spec.backup.beforeDelete runs when the Database is deleted.
func FinalBackupJobName(db *dbv1.Database) string { return db.Name + "-final-backup" }

// FinalBackupJob is the backup Job run before deletion.
func FinalBackupJob(db *dbv1.Database, eng engine.Engine, tls ServerTLS) (*batchv1ac.JobApplyConfiguration, error) {
	return backupJob(db, eng, tls, FinalBackupJobName(db), nil)
}

func backupJob(db *dbv1.Database, eng engine.Engine, tls ServerTLS, name string, annotations map[string]string) (*batchv1ac.JobApplyConfiguration, error) {
	spec, err := backupJobSpec(db, eng, tls)
	if err != nil {
		return nil, err
	}
	job := dumpJob(db, name, spec)
	if len(annotations) > 0 {
		job.WithAnnotations(annotations)
	}
	return job, nil
}

// backupJobSpec is the Job of one backup: one pod, no retries (a failed
// dump is reported, not hidden), a deadline.
func backupJobSpec(db *dbv1.Database, eng engine.Engine, tls ServerTLS) (*batchv1ac.JobSpecApplyConfiguration, error) {
	pod, err := dumpPodTemplate(db, eng, dumpRun{
		container: backupContainer,
		command:   eng.BackupCommand(BackupMountPath, db.Name, db.Spec.Backup.Retention),
		env:       eng.ClientEnv(ClientServiceHost(db), CredentialsSecretName(db)),
		claim:     BackupName(db),
		tls:       tls,
	})
	if err != nil {
		return nil, err
	}
	return batchv1ac.JobSpec().
		WithBackoffLimit(0).
		WithActiveDeadlineSeconds(backupActiveDeadlineSeconds).
		WithTemplate(pod), nil
}
