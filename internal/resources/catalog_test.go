package resources_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// podImages builds every object of db that runs a pod with eng and returns
// the image of each, by object.
func podImages(t *testing.T, db *dbv1.Database, eng engine.Engine) map[string]string {
	t.Helper()
	image := func(pod *corev1ac.PodTemplateSpecApplyConfiguration) string {
		require.Len(t, pod.Spec.Containers, 1)
		return *pod.Spec.Containers[0].Image
	}
	sts, err := resources.StatefulSet(db, eng, resources.TLSOff, testAgentImage)
	require.NoError(t, err)
	cron, err := resources.BackupCronJob(db, eng, resources.TLSOff)
	require.NoError(t, err)
	now, err := resources.OnDemandBackupJob(db, eng, resources.TLSOff, "t1")
	require.NoError(t, err)
	final, err := resources.FinalBackupJob(db, eng, resources.TLSOff)
	require.NoError(t, err)
	restore, err := resources.RestoreJob(db, eng, resources.TLSOff)
	require.NoError(t, err)
	return map[string]string{
		"statefulset":  image(sts.Spec.Template),
		"cronjob":      image(cron.Spec.JobTemplate.Spec.Template),
		"ondemand-job": image(now.Spec.Template),
		"final-job":    image(final.Spec.Template),
		"restore-job":  image(restore.Spec.Template),
	}
}

func every(img string) map[string]string {
	return map[string]string{"statefulset": img, "cronjob": img, "ondemand-job": img, "final-job": img, "restore-job": img}
}

// The StatefulSet and every backup and restore Job run the catalog's image
// of spec.version; spec.image wins over the catalog.
func TestCatalogImages(t *testing.T) {
	catalog, err := engine.NewCatalog("mirror.example.com/dockerhub", "postgres:15=localhost/dbkeeper/postgres:15")
	require.NoError(t, err)
	eng, err := catalog.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	bootstrap := func(db *dbv1.Database) {
		db.Spec.Bootstrap = &dbv1.BootstrapSpec{FromBackup: &dbv1.BootstrapFromBackup{Database: "old"}}
	}

	db := sample("orders", bootstrap)
	assert.Equal(t, every("mirror.example.com/dockerhub/postgres:17.12"), podImages(t, db, eng), "the prefix moves the built-in image")

	db = sample("orders", func(db *dbv1.Database) { bootstrap(db); db.Spec.Version = "15" })
	assert.Equal(t, every("localhost/dbkeeper/postgres:15"), podImages(t, db, eng), "the version's own image wins over the prefix")

	db.Spec.Image = "registry.example.com/postgres:15.14-custom"
	assert.Equal(t, every("registry.example.com/postgres:15.14-custom"), podImages(t, db, eng), "spec.image wins over the catalog")

	// The zero catalog is the built-in one: the golden files' images.
	builtIn, err := engine.Catalog{}.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	assert.Equal(t, every("docker.io/library/postgres:17.12"), podImages(t, sample("orders", bootstrap), builtIn))

	// A version without an image names the field to fix.
	_, err = resources.StatefulSet(sample("x", func(db *dbv1.Database) { db.Spec.Version = "9" }), eng, resources.TLSOff, testAgentImage)
	assert.ErrorContains(t, err, `postgres has no image for version "9": set spec.version to one of 14, 15, 16, 17`)
	_, err = resources.BackupCronJob(sample("x", func(db *dbv1.Database) { db.Spec.Version = "9" }), eng, resources.TLSOff)
	assert.ErrorContains(t, err, "spec.version")
}

// Only the image changes: a StatefulSet built with a catalog is the
// built-in one with another image (and so another restart hash).
func TestCatalogChangesOnlyTheImage(t *testing.T) {
	catalog, err := engine.NewCatalog("mirror.example.com/dockerhub", "")
	require.NoError(t, err)
	moved, err := catalog.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	builtIn, err := engine.For(dbv1.EnginePostgres)
	require.NoError(t, err)

	want, err := resources.StatefulSet(samples["default"], builtIn, resources.TLSOff, testAgentImage)
	require.NoError(t, err)
	got, err := resources.StatefulSet(samples["default"], moved, resources.TLSOff, testAgentImage)
	require.NoError(t, err)
	assert.Equal(t, "mirror.example.com/dockerhub/postgres:17.12", *got.Spec.Template.Spec.Containers[0].Image)
	got.Spec.Template.Spec.Containers[0].Image = want.Spec.Template.Spec.Containers[0].Image
	// another engine image restarts the pods
	assert.NotEqual(t, want.Spec.Template.Annotations[resources.AnnotationRestartHash], got.Spec.Template.Annotations[resources.AnnotationRestartHash])
	got.Spec.Template.Annotations[resources.AnnotationRestartHash] = want.Spec.Template.Annotations[resources.AnnotationRestartHash]
	assert.Equal(t, want, got)
}
