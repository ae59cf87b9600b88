package resources_test

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/reposerver"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestStoreIsTheVolumeRepositoryOnlyWhenAskedWithTLS: the object store
// wins; without one, the backup volume's repository is the store only
// with spec.backup.volumeRepository Enabled and TLS on (its server serves
// the Database's certificate), and the engine pods then get it as any
// object store, verified with the Database's CA; otherwise nothing (the
// dumps alone, the CronJob not suspended).
func TestStoreIsTheVolumeRepositoryOnlyWhenAskedWithTLS(t *testing.T) {
	eng, err := engine.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	plain := sample("orders", nil)
	assert.Nil(t, resources.Store(plain, resources.TLSOn), "a setting nobody resolved keeps the dumps alone")
	vol := sample("orders", func(db *dbv1.Database) { db.Spec.Backup.VolumeRepository = dbv1.VolumeRepositoryEnabled })
	assert.Nil(t, resources.Store(vol, resources.TLSOff), "no TLS, no volume repository")
	store := resources.Store(vol, resources.TLSOn)
	require.NotNil(t, store)
	assert.True(t, resources.IsVolumeStore(vol, store))
	assert.Equal(t, "orders-repository.shop.svc:9000", store.Endpoint)
	assert.Contains(t, resources.ServerDNSNames(vol), "orders-repository.shop.svc", "the certificate names the repository's Service")
	assert.NotContains(t, resources.ServerDNSNames(plain), "orders-repository.shop.svc")

	repo := repositoryOf(t, enginePod(t, vol, resources.TLSOn).Spec.Template.Spec.Containers[0])
	assert.Equal(t, store.Endpoint, repo.Endpoint)
	assert.Equal(t, reposerver.Bucket, repo.Bucket)
	assert.Equal(t, resources.RepositoryPath(vol, store), repo.Path)
	assert.NotEmpty(t, repo.CADir, "verified with the Database's CA")

	cron, err := resources.BackupCronJob(vol, eng, resources.TLSOn)
	require.NoError(t, err)
	assert.True(t, *cron.Spec.Suspend, "base backups replace the scheduled dumps")
	cron, err = resources.BackupCronJob(plain, eng, resources.TLSOn)
	require.NoError(t, err)
	assert.False(t, *cron.Spec.Suspend)
}

// TestVolumeRepositoryServer: one pod of the manager's image runs the S3
// server over the dumps' PVC with the Database's certificate and the
// credentials of its Secret (never in its arguments), without a
// ServiceAccount token; the Service selects it alone.
func TestVolumeRepositoryServer(t *testing.T) {
	eng, err := engine.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	db := sample("orders", func(db *dbv1.Database) { db.Spec.Backup.VolumeRepository = dbv1.VolumeRepositoryEnabled })
	sts := decode[appsv1.StatefulSet](t, resources.VolumeRepositoryStatefulSet(db, eng, testAgentImage))
	assert.Equal(t, "orders-repository", sts.Name)
	assert.Equal(t, int32(1), *sts.Spec.Replicas)
	pod := sts.Spec.Template.Spec
	assert.False(t, *pod.AutomountServiceAccountToken)
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	assert.Equal(t, testAgentImage, c.Image)
	assert.Equal(t, reposerver.Command, c.Command[1])
	for _, e := range c.Env {
		require.NotNil(t, e.ValueFrom, "%s comes from the Secret", e.Name)
		assert.Equal(t, "orders-repository", e.ValueFrom.SecretKeyRef.Name)
	}
	claims := map[string]bool{}
	for _, v := range pod.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims[v.PersistentVolumeClaim.ClaimName] = true
		}
	}
	assert.Equal(t, map[string]bool{resources.BackupName(db): true}, claims, "the backup volume")
	assert.NotEqual(t, resources.ComponentDatabase, sts.Spec.Template.Labels[resources.LabelComponent])

	svc := resources.VolumeRepositoryService(db)
	assert.Equal(t, sts.Spec.Template.Labels, svc.Spec.Selector)
	assert.Equal(t, int32(reposerver.Port), *svc.Spec.Ports[0].Port)

	sec, err := resources.VolumeRepositorySecret(db)
	require.NoError(t, err)
	again, err := resources.VolumeRepositorySecret(db)
	require.NoError(t, err)
	assert.NotEqual(t, sec.Data[agentapi.SecretAccessKeyFile], again.Data[agentapi.SecretAccessKeyFile], "random credentials")
	assert.Equal(t, corev1.SecretTypeOpaque, sec.Type)
}

// TestVolumeRepositoryForKeepsDumpsWhereTheyRan: unset means Enabled for a
// new Database (no dump CronJob yet) and keeps what the CronJob records
// afterwards; a Database made before this default (a CronJob without the
// record) keeps its dumps through an upgrade; a value set wins. The
// CronJob records the resolved setting, so the decision sticks.
func TestVolumeRepositoryForKeepsDumpsWhereTheyRan(t *testing.T) {
	eng, err := engine.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	cron := func(annotations map[string]string) *batchv1.CronJob {
		return &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Annotations: annotations}}
	}
	unset := sample("orders", nil)
	assert.Equal(t, dbv1.VolumeRepositoryEnabled, resources.VolumeRepositoryFor(unset, nil), "a new Database")
	assert.Equal(t, dbv1.VolumeRepositoryDisabled, resources.VolumeRepositoryFor(unset, cron(nil)), "made before the default: its dumps go on")
	assert.Equal(t, dbv1.VolumeRepositoryEnabled, resources.VolumeRepositoryFor(unset, cron(map[string]string{resources.AnnotationVolumeRepository: "Enabled"})))
	assert.Equal(t, dbv1.VolumeRepositoryDisabled, resources.VolumeRepositoryFor(unset, cron(map[string]string{resources.AnnotationVolumeRepository: "Disabled"})))
	for _, v := range []string{dbv1.VolumeRepositoryEnabled, dbv1.VolumeRepositoryDisabled} {
		set := sample("orders", func(db *dbv1.Database) { db.Spec.Backup.VolumeRepository = v })
		assert.Equal(t, v, resources.VolumeRepositoryFor(set, nil))
		assert.Equal(t, v, resources.VolumeRepositoryFor(set, cron(nil)))
	}

	for _, v := range []string{dbv1.VolumeRepositoryEnabled, dbv1.VolumeRepositoryDisabled} {
		db := sample("orders", func(db *dbv1.Database) { db.Spec.Backup.VolumeRepository = v })
		job, err := resources.BackupCronJob(db, eng, resources.TLSOn)
		require.NoError(t, err)
		written := cron(job.Annotations)
		unset := sample("orders", nil)
		assert.Equal(t, v, resources.VolumeRepositoryFor(unset, written), "the CronJob keeps the decision %s", v)
	}
	// with an object store or without TLS, Enabled does not take effect:
	// the dumps go on, and the repository comes when they go.
	withStore := sample("orders", func(db *dbv1.Database) {
		db.Spec.Backup.VolumeRepository = dbv1.VolumeRepositoryEnabled
		db.Spec.Backup.ObjectStore = &dbv1.ObjectStoreSpec{Endpoint: "s3.example", Bucket: "b", CredentialsSecret: "s"}
	})
	assert.False(t, resources.IsVolumeStore(withStore, resources.Store(withStore, resources.TLSOn)))
	assert.NotContains(t, resources.ServerDNSNames(withStore), "orders-repository.shop.svc")
}
