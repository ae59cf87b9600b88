package resources

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	batchv1ac "k8s.io/client-go/applyconfigurations/batch/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
)

// restoreContainer is the restore Job's one container.
const restoreContainer = "restore"

// RestoreJobName is the name of the Job that restores spec.bootstrap's dump.
func RestoreJobName(db *dbv1.Database) string { return db.Name + "-restore" }

// RestorePodHost is the DNS name of the Database's first pod under the
// headless Service, which publishes it before it is ready: the restore Job
// connects there, because the client Service selects no pod until the
// restore has finished.
func RestorePodHost(db *dbv1.Database) string {
	return fmt.Sprintf("%s-0.%s.%s.svc", StatefulSetName(db), HeadlessServiceName(db), db.Namespace)
}

// RestoreJob restores spec.bootstrap.fromBackup into the new Database: it
// mounts the source Database's backup volume read-only, waits for the
// server (on its pod, see RestorePodHost) and restores the dump logged in
// as the application's role (its password, as the dump Jobs do), so the
// application owns what it restores and the dump's statements can do no
// more than the application, only into a database that holds no data yet
// (see engine.Engine.RestoreCommand). It retries a few times, as a failed
// restore leaves the database as it was; a refusal
// (engine.RestoreRefusedExitCode) fails the Job at once through its pod
// failure policy, and the Job's Failed condition then has the reason
// PodFailurePolicy. With tls on it verifies the server's certificate for
// RestorePodHost (the certificate names every pod under the headless
// Service). It is nil when the Database has no bootstrap.
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
		env:       eng.ClientEnv(RestorePodHost(db), CredentialsSecretName(db)),
		claim:     BackupName(source),
		readOnly:  true,
		tls:       tls,
	})
	if err != nil {
		return nil, err
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
