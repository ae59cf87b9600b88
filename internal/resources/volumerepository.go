package resources

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/reposerver"
)

// ComponentVolumeRepository labels the S3 server of a Database's
// repository on its backup volume, and its pod.
const ComponentVolumeRepository = "backup-repository"

// volumeRepositoryDir is the repository's directory on the backup volume,
// beside the dumps.
const volumeRepositoryDir = "repository"

// volumeRepositoryPath is the path prefix in the volume repository's
// bucket, as an object store's default.
const volumeRepositoryPath = "/dbkeeper"

// VolumeRepositoryName names the StatefulSet, the Service and the Secret
// of a Database's repository on its backup volume.
func VolumeRepositoryName(db *dbv1.Database) string { return db.Name + "-repository" }

// AnnotationVolumeRepository, on the dump CronJob, records the
// spec.backup.volumeRepository in effect when the backup controller last
// wrote it (Enabled or Disabled; VolumeRepositoryFor reads it back).
const AnnotationVolumeRepository = "database.dbkeeper.io/volume-repository"

// VolumeRepositoryFor is the spec.backup.volumeRepository in effect for db:
// its own value when set; unset (the default), Enabled, except on a
// Database made before this default, which keeps its dumps so that an
// upgrade does not move it. cron is the live dump CronJob (nil when there
// is none): a new Database has none; one made before this default has one
// without AnnotationVolumeRepository. The annotation then keeps the
// decision. Enabled takes effect only with TLS on and without an object
// store (Store). Every controller that builds from the setting asks this
// (through facet.ResolveVolumeRepository), so they agree.
func VolumeRepositoryFor(db *dbv1.Database, cron *batchv1.CronJob) string {
	switch {
	case db.Spec.Backup.VolumeRepository != "":
		return db.Spec.Backup.VolumeRepository
	case cron == nil, cron.Annotations[AnnotationVolumeRepository] == dbv1.VolumeRepositoryEnabled:
		return dbv1.VolumeRepositoryEnabled
	}
	return dbv1.VolumeRepositoryDisabled
}

// Store is the object store db archives into and takes base backups to:
// spec.backup.objectStore, or the repository on its backup volume
// (VolumeStore) with spec.backup.volumeRepository Enabled and TLS on (the
// repository's S3 server serves the Database's certificate); nil
// otherwise, and the backups are the dumps alone. db's
// spec.backup.volumeRepository is the one in effect (VolumeRepositoryFor).
func Store(db *dbv1.Database, tls ServerTLS) *dbv1.ObjectStoreSpec {
	if s := db.Spec.Backup.ObjectStore; s != nil {
		return s
	}
	if !tls || db.Spec.Backup.VolumeRepository != dbv1.VolumeRepositoryEnabled {
		return nil
	}
	return VolumeStore(db)
}

// VolumeStore is the repository on db's backup volume, as an object store:
// its S3 server (VolumeRepositoryStatefulSet) behind the Service of
// VolumeRepositoryName, verified with the Database's CA, its credentials
// in the Secret of VolumeRepositoryName. It lives and dies with the
// backup volume: it survives neither the loss of the cluster nor of the
// volume's storage (spec.backup.objectStore does).
func VolumeStore(db *dbv1.Database) *dbv1.ObjectStoreSpec {
	return &dbv1.ObjectStoreSpec{
		Endpoint:          fmt.Sprintf("%s.%s.svc:%d", VolumeRepositoryName(db), db.Namespace, reposerver.Port),
		Bucket:            reposerver.Bucket,
		Path:              volumeRepositoryPath,
		URIStyle:          "Path",
		CredentialsSecret: VolumeRepositoryName(db),
		CASecret:          TLSSecretName(db),
	}
}

// IsVolumeStore says whether store is db's repository on its backup
// volume.
func IsVolumeStore(db *dbv1.Database, store *dbv1.ObjectStoreSpec) bool {
	return store != nil && db.Spec.Backup.ObjectStore == nil && store.CredentialsSecret == VolumeRepositoryName(db)
}

// VolumeRepositorySecret holds the volume repository's root credentials,
// generated once (the backup controller creates it when it is missing and
// never changes it); garbage collection takes it with the Database.
func VolumeRepositorySecret(db *dbv1.Database) (*corev1.Secret, error) {
	key, err := randomHex(10)
	if err != nil {
		return nil, err
	}
	secret, err := randomHex(20)
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:            VolumeRepositoryName(db),
			Namespace:       db.Namespace,
			Labels:          Labels(db, ComponentVolumeRepository),
			OwnerReferences: []metav1.OwnerReference{ownerReferenceOf(db)},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{agentapi.AccessKeyIDFile: []byte(strings.ToUpper(key)), agentapi.SecretAccessKeyFile: []byte(secret)},
	}, nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating the repository's credentials: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// VolumeRepositoryService is the ClusterIP Service of the volume
// repository's S3 server.
func VolumeRepositoryService(db *dbv1.Database) *corev1ac.ServiceApplyConfiguration {
	return corev1ac.Service(VolumeRepositoryName(db), db.Namespace).
		WithLabels(Labels(db, ComponentVolumeRepository)).
		WithOwnerReferences(OwnerReference(db)).
		WithSpec(corev1ac.ServiceSpec().
			WithType(corev1.ServiceTypeClusterIP).
			WithSelector(Labels(db, ComponentVolumeRepository)).
			WithPorts(corev1ac.ServicePort().WithName("s3").WithPort(reposerver.Port).
				WithTargetPort(intstr.FromString("s3")).WithProtocol(corev1.ProtocolTCP)))
}

// VolumeRepositoryStatefulSet runs the volume repository's S3 server
// (`manager repository-server`, versitygw) from agentImage, the manager's
// image: one pod that mounts the backup volume (the dumps' PVC) and the
// Database's certificate, with the credentials of its Secret, as the
// engine's user. It answers on reposerver.Port.
func VolumeRepositoryStatefulSet(db *dbv1.Database, eng engine.Engine, agentImage string) *appsv1ac.StatefulSetApplyConfiguration {
	labels := Labels(db, ComponentVolumeRepository)
	secretKey := func(key string) *corev1ac.EnvVarSourceApplyConfiguration {
		return corev1ac.EnvVarSource().WithSecretKeyRef(corev1ac.SecretKeySelector().WithName(VolumeRepositoryName(db)).WithKey(key))
	}
	const tlsDir, volumeDir = "/etc/dbkeeper/tls", "/backup"
	container := corev1ac.Container().
		WithName("s3").
		WithImage(agentImage).
		WithCommand("/manager", reposerver.Command, "--dir="+volumeDir+"/"+volumeRepositoryDir,
			"--cert="+tlsDir+"/tls.crt", "--key="+tlsDir+"/tls.key").
		WithEnv(
			corev1ac.EnvVar().WithName(reposerver.EnvAccessKeyID).WithValueFrom(secretKey(agentapi.AccessKeyIDFile)),
			corev1ac.EnvVar().WithName(reposerver.EnvSecretAccessKey).WithValueFrom(secretKey(agentapi.SecretAccessKeyFile))).
		WithPorts(corev1ac.ContainerPort().WithName("s3").WithContainerPort(reposerver.Port).WithProtocol(corev1.ProtocolTCP)).
		WithReadinessProbe(corev1ac.Probe().
			WithTCPSocket(corev1ac.TCPSocketAction().WithPort(intstr.FromString("s3"))).
			WithPeriodSeconds(5)).
		WithResources(corev1ac.ResourceRequirements().
			WithRequests(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")}).
			WithLimits(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")})).
		WithSecurityContext(restrictedContainer(eng.User())).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName(backupVolume).WithMountPath(volumeDir),
			corev1ac.VolumeMount().WithName(tlsVolume).WithMountPath(tlsDir).WithReadOnly(true))
	pod := corev1ac.PodSpec().
		WithEnableServiceLinks(false).
		WithAutomountServiceAccountToken(false).
		WithSecurityContext(restrictedPod(eng.User())).
		WithVolumes(
			corev1ac.Volume().WithName(backupVolume).WithPersistentVolumeClaim(corev1ac.PersistentVolumeClaimVolumeSource().WithClaimName(BackupName(db))),
			corev1ac.Volume().WithName(tlsVolume).WithSecret(corev1ac.SecretVolumeSource().WithSecretName(TLSSecretName(db)).WithDefaultMode(0o440).
				WithItems(corev1ac.KeyToPath().WithKey("tls.crt").WithPath("tls.crt"), corev1ac.KeyToPath().WithKey("tls.key").WithPath("tls.key")))).
		WithContainers(container)
	return appsv1ac.StatefulSet(VolumeRepositoryName(db), db.Namespace).
		WithLabels(labels).
		WithOwnerReferences(OwnerReference(db)).
		WithSpec(appsv1ac.StatefulSetSpec().
			WithReplicas(1).
			WithServiceName(VolumeRepositoryName(db)).
			WithUpdateStrategy(appsv1ac.StatefulSetUpdateStrategy().WithType(appsv1.RollingUpdateStatefulSetStrategyType)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
			WithTemplate(corev1ac.PodTemplateSpec().WithLabels(labels).WithSpec(pod)))
}
