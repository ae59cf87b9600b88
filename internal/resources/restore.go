package resources

import (
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	batchv1ac "k8s.io/client-go/applyconfigurations/batch/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
)

// restoreContainer is the restore Job's one container.
const restoreContainer = "restore"

// RestoreJobName is the name of the Job that restores spec.bootstrap's dump.
func RestoreJobName(db *dbv1.Database) string { return db.Name + "-restore" }

// RestoreClientSecretName is the kubernetes.io/tls Secret of the restore
// Job's client certificate (RestoreClientSecret).
func RestoreClientSecretName(db *dbv1.Database) string { return db.Name + "-restore-client" }

// RestoreClientLifetime is how long the restore Job's client certificate
// is valid: the Job's deadline and an hour to start it.
const RestoreClientLifetime = backupActiveDeadlineSeconds*time.Second + time.Hour

// restoreClientMountPath is where the restore container finds its client
// certificate and key.
const (
	restoreClientMountPath = "/etc/dbkeeper/tls-client"
	restoreClientVolume    = "tls-client"
)

// RestoreClientSecret holds the client certificate the restore Job logs
// in with as the superuser when its server takes no superuser password
// over TCP (ClientCertAuth): signed by the Database's CA for the
// superuser, valid for RestoreClientLifetime, owned by the Database; the
// backup controller makes it before the Job and deletes it once the
// restore has finished.
func RestoreClientSecret(db *dbv1.Database, certPEM, keyPEM []byte) *corev1ac.SecretApplyConfiguration {
	return corev1ac.Secret(RestoreClientSecretName(db), db.Namespace).
		WithLabels(Labels(db, ComponentBackup)).
		WithOwnerReferences(OwnerReference(db)).
		WithType(corev1.SecretTypeTLS).
		WithData(map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM})
}

// addRestoreClient mounts RestoreClientSecret into the restore container
// and makes libpq present it (readable by root and the pod's fsGroup,
// which libpq accepts for a root-owned key).
func addRestoreClient(db *dbv1.Database, pod *corev1ac.PodTemplateSpecApplyConfiguration) {
	pod.Spec.WithVolumes(corev1ac.Volume().WithName(restoreClientVolume).WithSecret(corev1ac.SecretVolumeSource().
		WithSecretName(RestoreClientSecretName(db)).
		WithDefaultMode(tlsFileMode)))
	c := &pod.Spec.Containers[0]
	c.WithVolumeMounts(corev1ac.VolumeMount().WithName(restoreClientVolume).WithMountPath(restoreClientMountPath).WithReadOnly(true))
	c.WithEnv(
		corev1ac.EnvVar().WithName("PGSSLCERT").WithValue(restoreClientMountPath+"/"+corev1.TLSCertKey),
		corev1ac.EnvVar().WithName("PGSSLKEY").WithValue(restoreClientMountPath+"/"+corev1.TLSPrivateKeyKey))
}

// RestorePodHost is the DNS name of the Database's first pod under the
// headless Service, which publishes it before it is ready: the restore Job
// connects there, because the client Service selects no pod until the
// restore has finished.
func RestorePodHost(db *dbv1.Database) string {
	return fmt.Sprintf("%s-0.%s.%s.svc", StatefulSetName(db), HeadlessServiceName(db), db.Namespace)
}

// RestoreJob restores spec.bootstrap.fromBackup into the new Database: it
// mounts the source Database's backup volume read-only, waits for the
// server (on its pod, see RestorePodHost) and restores the dump as the
// superuser (<name>-superuser) with SET ROLE to the application's role, so
// the application owns what it restores, only into a database that holds no data yet
// (see engine.Engine.RestoreCommand). It retries a few times, as a failed
// restore leaves the database as it was; a refusal
// (engine.RestoreRefusedExitCode) fails the Job at once through its pod
// failure policy, and the Job's Failed condition then has the reason
// PodFailurePolicy. With tls on it verifies the server's certificate for
// RestorePodHost (the certificate names every pod under the headless
// Service), and with ClientCertAuth logs in with RestoreClientSecret's
// certificate instead of the superuser's password. It is nil when the
// Database has no bootstrap.
func RestoreJob(db *dbv1.Database, eng engine.Engine, tls ServerTLS) (*batchv1ac.JobApplyConfiguration, error) {
	if db.Spec.Bootstrap == nil || db.Spec.Bootstrap.FromBackup == nil {
		return nil, nil
	}
	from := db.Spec.Bootstrap.FromBackup
	file := from.File
	if file == "" {
		file = "latest"
	}
	source := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: from.Database, Namespace: db.Namespace}}
	pod, err := dumpPodTemplate(db, eng, dumpRun{
		container: restoreContainer,
		command:   eng.RestoreCommand(BackupMountPath, from.Database, file),
		env:       eng.RestoreEnv(RestorePodHost(db), SuperuserSecretName(db), CredentialsSecretName(db)),
		claim:     BackupName(source),
		readOnly:  true,
		tls:       tls,
	})
	if err != nil {
		return nil, err
	}
	if ClientCertAuth(db, tls) {
		addRestoreClient(db, pod)
	}
	return dumpJob(db, RestoreJobName(db), batchv1ac.JobSpec().
		WithBackoffLimit(3).
		WithPodFailurePolicy(batchv1ac.PodFailurePolicy().WithRules(
			batchv1ac.PodFailurePolicyRule().
				WithAction(batchv1.PodFailurePolicyActionFailJob).
				WithOnExitCodes(batchv1ac.PodFailurePolicyOnExitCodesRequirement().
					WithContainerName(restoreContainer).
					WithOperator(batchv1.PodFailurePolicyOnExitCodesOpIn).
					WithValues(engine.RestoreRefusedExitCode)))).
		WithActiveDeadlineSeconds(backupActiveDeadlineSeconds).
		WithTemplate(pod)), nil
}
