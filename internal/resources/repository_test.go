package resources_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

func withStore(db *dbv1.Database) {
	db.Spec.Backup.ObjectStore = &dbv1.ObjectStoreSpec{Endpoint: "s3.example:9000", Bucket: "backups", Path: "/dbkeeper",
		CredentialsSecret: "store", CASecret: "store-ca", URIStyle: "Path"}
}

// TestRepositoryPathsNeverMeet: Databases of the same name in two
// namespaces, and one re-created with the name of a deleted one, archive
// under different paths.
func TestRepositoryPathsNeverMeet(t *testing.T) {
	a := sample("orders", withStore)
	b := sample("orders", withStore)
	b.Namespace = "other"
	c := sample("orders", withStore)
	c.UID = types.UID("a-new-uid")
	paths := map[string]bool{}
	for _, db := range []*dbv1.Database{a, b, c} {
		p := resources.RepositoryPath(db, db.Spec.Backup.ObjectStore)
		assert.NotEmpty(t, p)
		assert.False(t, paths[p], "two Databases share %s", p)
		paths[p] = true
	}
	assert.Equal(t, "/dbkeeper/shop/orders/"+string(a.UID), resources.RepositoryPath(a, a.Spec.Backup.ObjectStore))
	assert.Empty(t, resources.RepositoryPath(sample("dumps", nil), nil), "no object store, no path")
}

// TestStatefulSetCarriesTheRepository: the engine container gets the
// repository (its path, the recovery window) and the store's Secrets as
// read-only files, never as environment values.
func TestStatefulSetCarriesTheRepository(t *testing.T) {
	db := sample("orders", func(db *dbv1.Database) { withStore(db); db.Spec.Backup.RecoveryWindow = "14d" })
	pod := enginePod(t, db, resources.TLSOff).Spec.Template.Spec
	c := pod.Containers[0]
	repo := repositoryOf(t, c)
	for _, e := range c.Env {
		assert.NotContains(t, e.Value, "secretAccessKey\":\"", "a secret in the environment")
	}
	assert.Equal(t, resources.RepositoryPath(db, db.Spec.Backup.ObjectStore), repo.Path)
	assert.Equal(t, 14*24*time.Hour, repo.RecoveryWindow)
	assert.Nil(t, repo.Secrets)
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
		if m.MountPath == repo.CredentialsDir || m.MountPath == repo.CADir {
			assert.True(t, m.ReadOnly)
		}
	}
	require.Contains(t, mounts, repo.CredentialsDir)
	require.Contains(t, mounts, repo.CADir)
	for _, v := range pod.Volumes {
		if v.Name == mounts[repo.CredentialsDir] {
			require.NotNil(t, v.Secret)
			assert.Equal(t, "store", v.Secret.SecretName)
		}
	}
}

// TestRecoveryStoreNeedsConsent: a source must name the new Database's
// namespace in its annotation, its own namespace too; a missing source, one
// without an object store and the Database itself are refused with a
// message naming the field; the repository recovered is the source's own
// path.
func TestRecoveryStoreNeedsConsent(t *testing.T) {
	source := sample("orders", withStore)
	source.Namespace = "prod"
	source.UID = "source-uid"
	restore := func(ns string) *dbv1.Database {
		return sample("orders-copy", func(db *dbv1.Database) {
			db.Namespace = "staging"
			db.Spec.Bootstrap = &dbv1.BootstrapSpec{Recovery: &dbv1.BootstrapRecovery{Database: "orders", Namespace: ns}}
		})
	}
	refused := func(t *testing.T, err error, contains string) {
		t.Helper()
		var r *resources.RecoveryRefusedError
		require.True(t, errors.As(err, &r), "%v", err)
		assert.Contains(t, err.Error(), contains)
	}

	_, err := resources.RecoveryStore(restore("prod"), source)
	refused(t, err, dbv1.AnnotationRestoreAllowedNamespaces)

	source.Annotations = map[string]string{dbv1.AnnotationRestoreAllowedNamespaces: "dev, staging"}
	store, err := resources.RecoveryStore(restore("prod"), source)
	require.NoError(t, err)
	assert.Equal(t, resources.RepositoryPath(source, source.Spec.Backup.ObjectStore), store.Path)
	assert.Equal(t, "/dbkeeper/prod/orders/source-uid", store.Path)

	source.Annotations[dbv1.AnnotationRestoreAllowedNamespaces] = "*"
	_, err = resources.RecoveryStore(restore("prod"), source)
	require.NoError(t, err)

	_, err = resources.RecoveryStore(restore("prod"), nil)
	refused(t, err, "does not exist")
	source.Spec.Backup.ObjectStore = nil
	_, err = resources.RecoveryStore(restore("prod"), source)
	refused(t, err, "no archive to recover from")

	// a source archiving on its backup volume: its own namespace only,
	// whatever its annotation says (the repository's credentials are its
	// root's).
	source.Spec.Backup.VolumeRepository = dbv1.VolumeRepositoryEnabled
	source.Status.Backup = &dbv1.BackupStatus{RepositoryPath: "/dbkeeper/prod/orders/source-uid"}
	_, err = resources.RecoveryStore(restore("prod"), source)
	refused(t, err, "only Databases of namespace prod")
	sameNS := restore("prod")
	sameNS.Namespace = "prod"
	source.Annotations = nil
	_, err = resources.RecoveryStore(sameNS, source)
	refused(t, err, "kubectl annotate database -n prod orders "+dbv1.AnnotationRestoreAllowedNamespaces+"=prod")
	source.Annotations = map[string]string{dbv1.AnnotationRestoreAllowedNamespaces: "prod"}
	store, err = resources.RecoveryStore(sameNS, source)
	require.NoError(t, err)
	assert.Equal(t, "orders-repository.prod.svc:9000", store.Endpoint)
	assert.Equal(t, "/dbkeeper/prod/orders/source-uid", store.Path)
	assert.Equal(t, "orders-repository", store.CredentialsSecret)
	source.Spec.Backup.VolumeRepository = ""

	self := restore("")
	_, err = resources.RecoveryStore(self, self)
	refused(t, err, "its own archive")

	// a path of a Database that is gone: taken as it is, with the target.
	gone := sample("orders-copy", func(db *dbv1.Database) {
		db.Spec.Bootstrap = &dbv1.BootstrapSpec{Recovery: &dbv1.BootstrapRecovery{
			ObjectStore: &dbv1.ObjectStoreSpec{Endpoint: "s3.example", Bucket: "b", Path: "/dbkeeper/prod/orders/old-uid", CredentialsSecret: "s"},
			Target:      &dbv1.RecoveryTarget{Time: "2026-12-05T14:01:59.5Z"}}}
	})
	store, err = resources.RecoveryStore(gone, nil)
	require.NoError(t, err)
	src := resources.RecoverySource(gone, store, agentapi.RepositorySecrets{AccessKeyID: "k", SecretAccessKey: "s"})
	assert.Equal(t, "/dbkeeper/prod/orders/old-uid", src.Repository.Path)
	assert.Equal(t, "2026-12-05T14:01:59.5Z", src.Target.Time)
	assert.Equal(t, "k", src.Repository.Secrets.AccessKeyID)
	assert.Empty(t, src.Repository.CredentialsDir)
}

// repositoryOf is the agentapi.Repository a container gets in
// agentapi.EnvRepository (the zero one without).
func repositoryOf(t *testing.T, c corev1.Container) agentapi.Repository {
	t.Helper()
	var repo agentapi.Repository
	for _, e := range c.Env {
		if e.Name == agentapi.EnvRepository {
			require.NoError(t, json.Unmarshal([]byte(e.Value), &repo))
		}
	}
	return repo
}

// TestRecoveryWindow: spec.backup.recoveryWindow in days or hours; 7
// days when unset or not one of those.
func TestRecoveryWindow(t *testing.T) {
	week := 7 * 24 * time.Hour
	for v, want := range map[string]time.Duration{
		"":       week,
		"7d":     week,
		"1d":     24 * time.Hour,
		"30d":    30 * 24 * time.Hour,
		"9999d":  9999 * 24 * time.Hour,
		"1h":     time.Hour,
		"36h":    36 * time.Hour,
		"0d":     week,
		"-3d":    week,
		"+3d":    week,
		"3":      week,
		"d":      week,
		"3w":     week,
		"3m":     week,
		"1.5h":   week,
		"3dd":    week,
		"99999d": week,
	} {
		db := sample("orders", func(db *dbv1.Database) { withStore(db); db.Spec.Backup.RecoveryWindow = v })
		assert.Equal(t, want, resources.RecoveryWindow(db), "%q", v)
	}
}
