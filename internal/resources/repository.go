package resources

import (
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// repositoryMountPath is where the engine container mounts the Secrets of
// the Database's object store.
const (
	repositoryMountPath = "/dbkeeper/repository"
)

// RepositoryPath is where in store's bucket db archives (store is
// Store(db, tls)): <store.path>/<namespace>/<name>/<uid>. The UID makes it
// a path no other Database ever writes, not even one of the same name
// created after this one was deleted. Empty without a store.
func RepositoryPath(db *dbv1.Database, store *dbv1.ObjectStoreSpec) string {
	if store == nil || db.UID == "" {
		return ""
	}
	return path.Join("/", store.Path, db.Namespace, db.Name, string(db.UID))
}

// RecoveryStore is the repository spec.bootstrap.recovery restores: the
// object store with path set to the whole repository path. source is the
// Database recovery.database names (nil for an objectStore source); a
// source in another namespace must list db's namespace in its
// restore-allowed-namespaces annotation.
func RecoveryStore(db, source *dbv1.Database) (*dbv1.ObjectStoreSpec, error) {
	rec := db.Spec.Bootstrap.Recovery
	if rec.ObjectStore != nil {
		store := *rec.ObjectStore
		return &store, nil
	}
	ns := rec.Namespace
	if ns == "" {
		ns = db.Namespace
	}
	ref := ns + "/" + rec.Database
	if source == nil {
		return nil, refuse("spec.bootstrap.recovery.database: Database %s does not exist", ref)
	}
	if source.UID == db.UID {
		return nil, refuse("spec.bootstrap.recovery.database: a Database cannot recover from its own archive")
	}
	if err := notConsented("spec.bootstrap.recovery.database", db, source); err != nil {
		return nil, err
	}
	if source.Spec.Backup.ObjectStore != nil {
		store := *source.Spec.Backup.ObjectStore
		store.Path = RepositoryPath(source, source.Spec.Backup.ObjectStore)
		return &store, nil
	}
	// the repository on the source's backup volume, once it has archived
	// (its status names the path).
	if source.Status.Backup == nil || source.Status.Backup.RepositoryPath == "" {
		return nil, refuse("spec.bootstrap.recovery.database: Database %s has no archive to recover from (no spec.backup.objectStore, and no repository on its backup volume yet)", ref)
	}
	if ns != db.Namespace {
		// the volume repository's credentials are its root's: they do not
		// leave the source's namespace.
		return nil, refuse("spec.bootstrap.recovery.database: Database %s keeps its archive on its backup volume, which only Databases of namespace %s can recover from; give it spec.backup.objectStore to share its backups with other namespaces", ref, ns)
	}
	store := VolumeStore(source)
	store.Path = source.Status.Backup.RepositoryPath
	return store, nil
}

// agentRepository is the agent's view of store at repository path repo,
// without its Secrets.
func agentRepository(store *dbv1.ObjectStoreSpec, repo string) agentapi.Repository {
	return agentapi.Repository{Endpoint: store.Endpoint, Bucket: store.Bucket, Path: repo, Region: store.Region,
		URIStyle: strings.ToLower(store.URIStyle)}
}

// addRepository gives the engine container db's repository (Store): its
// description in agentapi.EnvRepository and its Secrets as files (so that a
// rotated key reaches pgBackRest without a restart).
func addRepository(db *dbv1.Database, tls ServerTLS, pod *corev1ac.PodSpecApplyConfiguration, container *corev1ac.ContainerApplyConfiguration) error {
	store := Store(db, tls)
	if store == nil {
		return nil
	}
	repo := agentRepository(store, RepositoryPath(db, store))
	repo.CredentialsDir = repositoryMountPath + "/credentials"
	if store.CASecret != "" {
		repo.CADir = repositoryMountPath + "/ca"
	}
	if store.EncryptionSecret != "" {
		repo.CipherDir = repositoryMountPath + "/cipher"
	}
	repo.RecoveryWindow = RecoveryWindow(db)
	repo.ArchiveTimeout = ArchiveTimeout(db)
	raw, err := json.Marshal(repo)
	if err != nil {
		return fmt.Errorf("encoding the repository: %w", err)
	}
	container.WithEnv(corev1ac.EnvVar().WithName(agentapi.EnvRepository).WithValue(string(raw)))
	mountStoreSecrets(pod, container, "repository", repositoryMountPath, store)
	return nil
}

// RecoverySource is what the first instance of db restores (the agent's
// restore bootstrap): store (see RecoveryStore) with its Secrets' values,
// and spec.bootstrap.recovery.target.
func RecoverySource(db *dbv1.Database, store *dbv1.ObjectStoreSpec, secrets agentapi.RepositorySecrets) agentapi.RecoverySource {
	repo := agentRepository(store, store.Path)
	repo.Secrets = &secrets
	return agentapi.RecoverySource{Repository: repo, Target: RecoveryTarget(db)}
}

// RecoveryTarget is spec.bootstrap.recovery.target as the agent takes it;
// the zero value (no target) replays to the end of the archive.
func RecoveryTarget(db *dbv1.Database) agentapi.RecoveryTarget {
	t := db.Spec.Bootstrap.Recovery.Target
	if t == nil {
		return agentapi.RecoveryTarget{}
	}
	return agentapi.RecoveryTarget{Time: t.Time, LSN: t.LSN, XID: t.XID, Name: t.Name}
}

// mountStoreSecrets mounts store's credentials, CA and passphrase Secrets
// read-only under dir, as volumes named prefix-*.
func mountStoreSecrets(pod *corev1ac.PodSpecApplyConfiguration, container *corev1ac.ContainerApplyConfiguration, prefix, dir string, store *dbv1.ObjectStoreSpec) {
	mount := func(name, secret, sub string, keys ...string) {
		items := make([]*corev1ac.KeyToPathApplyConfiguration, 0, len(keys))
		for _, k := range keys {
			items = append(items, corev1ac.KeyToPath().WithKey(k).WithPath(k))
		}
		pod.WithVolumes(corev1ac.Volume().WithName(prefix + "-" + name).
			WithSecret(corev1ac.SecretVolumeSource().WithSecretName(secret).WithDefaultMode(0o440).WithItems(items...)))
		container.WithVolumeMounts(corev1ac.VolumeMount().WithName(prefix + "-" + name).WithMountPath(dir + "/" + sub).WithReadOnly(true))
	}
	mount("credentials", store.CredentialsSecret, "credentials", agentapi.AccessKeyIDFile, agentapi.SecretAccessKeyFile)
	if store.CASecret != "" {
		mount("ca", store.CASecret, "ca", agentapi.CAFile)
	}
	if store.EncryptionSecret != "" {
		mount("cipher", store.EncryptionSecret, "cipher", agentapi.PassphraseFile)
	}
}

// RecoveryWindow is spec.backup.recoveryWindow: "<n>d" days or "<n>h"
// hours; 7 days when unset or not one of those.
func RecoveryWindow(db *dbv1.Database) time.Duration {
	const week = 7 * 24 * time.Hour
	v := db.Spec.Backup.RecoveryWindow
	if len(v) < 2 {
		return week
	}
	n, err := strconv.Atoi(v[:len(v)-1])
	if err != nil || n <= 0 || n > 9999 || strings.HasPrefix(v, "+") {
		return week
	}
	switch v[len(v)-1] {
	case 'd':
		return time.Duration(n) * 24 * time.Hour
	case 'h':
		return time.Duration(n) * time.Hour
	}
	return week
}

// ArchiveTimeout is spec.backup.archiveTimeout (5 minutes when unset).
func ArchiveTimeout(db *dbv1.Database) time.Duration {
	if t := db.Spec.Backup.ArchiveTimeout; t != nil && t.Duration > 0 {
		return t.Duration
	}
	return 5 * time.Minute
}
