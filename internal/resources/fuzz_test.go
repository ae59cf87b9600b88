package resources_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// FuzzBuilders feeds arbitrary specs (as the API server could store them,
// and worse) through every builder: an error is fine, a panic is not.
// `make fuzz` runs it for longer; `make test` for a few seconds.
func FuzzBuilders(f *testing.F) {
	f.Add("orders", "17", "", int32(1), "10Gi", "", "", "ClusterIP", "0 3 * * *", int32(7), false, "Delete", "", "latest", "t")
	f.Add("billing", "15", "registry.example.com/pg:15@sha256:00", int32(3), "1Ti", "fast", "owner", "LoadBalancer", "@hourly", int32(24), true, "Retain", "old", "billing-20261202T030000Z.dump", "")
	f.Add("", "", ":::", int32(-1), "-5", "\x00", "a/b", "Bogus", "", int32(0), false, "", "x", "", "\n")
	eng, err := engine.For(dbv1.EnginePostgres)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, name, version, image string, replicas int32, size, class, secretName, svcType, schedule string,
		retention int32, suspend bool, policy, bootstrapFrom, bootstrapFile, token string) {
		db := &dbv1.Database{}
		db.Name, db.Namespace = name, "fuzz"
		db.Spec.Engine = dbv1.EnginePostgres
		db.Spec.Version, db.Spec.Image = version, image
		db.Spec.Replicas = ptr.To(replicas)
		if q, err := resource.ParseQuantity(size); err == nil {
			db.Spec.Storage.Size = &q
			db.Spec.Backup.Storage.Size = &q
		}
		if class != "" {
			db.Spec.Storage.StorageClassName = ptr.To(class)
		}
		if secretName != "" {
			db.Spec.Credentials = &dbv1.CredentialsSpec{SecretName: secretName}
		}
		db.Spec.Service.Type = corev1.ServiceType(svcType)
		db.Spec.Backup.Schedule, db.Spec.Backup.Retention, db.Spec.Backup.Suspend = schedule, retention, suspend
		db.Spec.DeletionPolicy = dbv1.DeletionPolicy(policy)
		if bootstrapFrom != "" {
			db.Spec.Bootstrap = &dbv1.BootstrapSpec{FromBackup: &dbv1.BootstrapFromBackup{Database: bootstrapFrom, File: bootstrapFile}}
		}

		_, _ = resources.StatefulSet(db, eng, resources.TLSOff, testAgentImage)
		_ = resources.ClientService(db, eng)
		_ = resources.HeadlessService(db, eng)
		_ = resources.CredentialsSecret(db, eng, token, resources.ClientTLS{})
		_ = resources.CredentialsSecretMetadata(db)
		_ = resources.BackupPVC(db)
		_, _ = resources.BackupCronJob(db, eng, resources.TLSOff)
		_, _ = resources.OnDemandBackupJob(db, eng, resources.TLSOff, token)
		_, _ = resources.FinalBackupJob(db, eng, resources.TLSOff)
		_, _ = resources.RestoreJob(db, eng, resources.TLSOff)
		_ = resources.OnDemandBackupJobName(db, token)
		_ = resources.Endpoint(db, eng.Port())
	})
}
