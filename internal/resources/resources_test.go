package resources_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// sample returns a Database as the API server stores it after defaulting.
func sample(name string, mutate func(*dbv1.Database)) *dbv1.Database {
	db := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: "0b1c2d3e-0000-4000-8000-000000000001"},
		Spec: dbv1.DatabaseSpec{
			Engine:   dbv1.EnginePostgres,
			Version:  "17",
			Replicas: ptr.To[int32](1),
			Storage:  dbv1.StorageSpec{Size: ptr.To(resource.MustParse("10Gi"))},
			Service:  dbv1.ServiceSpec{Type: corev1.ServiceTypeClusterIP},
			Backup: dbv1.BackupSpec{
				Schedule:  "0 3 * * *",
				Retention: 7,
				MaxAge:    &metav1.Duration{Duration: 26 * 3600e9},
				Storage:   dbv1.StorageSpec{Size: ptr.To(resource.MustParse("20Gi"))},
			},
			DeletionPolicy: dbv1.DeletionPolicyDelete,
		},
	}
	if mutate != nil {
		mutate(db)
	}
	return db
}

var samples = map[string]*dbv1.Database{
	"default": sample("orders", nil),
	"custom": sample("billing", func(db *dbv1.Database) {
		db.Spec.Version = "15"
		db.Spec.Image = "registry.example.com/postgres:15.14@sha256:0123"
		db.Spec.Replicas = ptr.To[int32](3)
		db.Spec.Storage.StorageClassName = ptr.To("fast")
		db.Spec.Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
		}
		db.Spec.Credentials = &dbv1.CredentialsSpec{SecretName: "billing-owner"}
		db.Spec.Service = dbv1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Annotations: map[string]string{"service.beta.kubernetes.io/aws-load-balancer-internal": "true"}}
		db.Spec.Backup.Schedule = "@hourly"
		db.Spec.Backup.Suspend = true
		db.Spec.Backup.Retention = 24
		db.Spec.Backup.Storage.StorageClassName = ptr.To("cheap")
		db.Spec.Bootstrap = &dbv1.BootstrapSpec{FromBackup: &dbv1.BootstrapFromBackup{Database: "billing-old", File: "latest"}}
		// Dedicated database nodes: tainted, labelled, their own priority.
		db.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "database", Effect: corev1.TaintEffectNoSchedule}}
		db.Spec.NodeSelector = map[string]string{"node-role.example.com/database": ""}
		db.Spec.PriorityClassName = "database-critical"
		db.Spec.TopologySpreadConstraints = &[]corev1.TopologySpreadConstraint{
			{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule},
		}
	}),
}

func TestGolden(t *testing.T) {
	eng, err := engine.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	for name, db := range samples {
		sts, err := resources.StatefulSet(db, eng, resources.TLSOff, testAgentImage)
		require.NoError(t, err)
		cron, err := resources.BackupCronJob(db, eng, resources.TLSOff)
		require.NoError(t, err)
		objects := map[string]any{
			"statefulset":        sts,
			"service":            resources.ClientService(db, eng),
			"headless-service":   resources.HeadlessService(db, eng),
			"ro-service":         resources.ReadOnlyService(db, eng),
			"pdb":                resources.PodDisruptionBudget(db),
			"primary-pdb":        resources.PrimaryDisruptionBudget(db),
			"replication-secret": resources.ReplicationSecret(db, "not-a-real-password", "not-a-real-token"),
			"secret":             resources.CredentialsSecret(db, eng, "not-a-real-password", resources.ClientTLS{}),
			"secret-metadata":    resources.CredentialsSecretMetadata(db),
			"superuser-secret":   resources.SuperuserSecret(db, eng.Superuser(), "not-a-real-password"),
			"cronjob":            cron,
			"backup-pvc":         resources.BackupPVC(db),
			"instance-sa":        resources.InstanceServiceAccount(db),
			"instance-role":      resources.InstanceRole(db),
			"instance-rb":        resources.InstanceRoleBinding(db),
			"lease":              resources.LeaseObject(db, resources.LeaseMembers(db, "")),
		}
		tlsSts, err := resources.StatefulSet(db, eng, resources.TLSOn, testAgentImage)
		require.NoError(t, err)
		assertRestricted(t, tlsSts.Spec.Template.Spec, eng.User())
		objects["tls-statefulset"] = tlsSts
		tlsCron, err := resources.BackupCronJob(db, eng, resources.TLSOn)
		require.NoError(t, err)
		objects["tls-cronjob"] = tlsCron
		objects["tls-secret"] = resources.CredentialsSecret(db, eng, "not-a-real-password", resources.ClientTLS{On: resources.TLSOn, CA: []byte("not-a-real-ca")})
		objects["tls-server-secret"] = resources.TLSSecret(db, []byte("not-a-real-cert"), []byte("not-a-real-key"), []byte("not-a-real-ca"), "0123abcd")
		objects["tls-ca-secret"] = resources.CASecret(db, []byte("not-a-real-ca"), []byte("not-a-real-key"))
		objects["tls-hba"] = resources.HBAConfigMap(db, eng)
		if tlsRestore, err := resources.RestoreJob(db, eng, resources.TLSOn); tlsRestore != nil {
			require.NoError(t, err)
			objects["tls-restore-job"] = tlsRestore
		}
		ondemand, err := resources.OnDemandBackupJob(db, eng, resources.TLSOff, "token-1")
		require.NoError(t, err)
		objects["ondemand-job"] = ondemand
		restore, err := resources.RestoreJob(db, eng, resources.TLSOff)
		require.NoError(t, err)
		if restore != nil {
			objects["restore-job"] = restore
			assertRestricted(t, restore.Spec.Template.Spec, 999)
			assert.Equal(t, "billing-old-backup", *restore.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName)
		} else {
			assert.Nil(t, db.Spec.Bootstrap, "no restore Job for a bootstrap")
		}
		for kind, obj := range objects {
			t.Run(name+"/"+kind, func(t *testing.T) {
				got, err := yaml.Marshal(obj)
				require.NoError(t, err)
				golden := filepath.Join("testdata", name+"-"+kind+".golden.yaml")
				if *update {
					require.NoError(t, os.WriteFile(golden, got, 0o644))
				}
				want, err := os.ReadFile(golden)
				require.NoError(t, err, "run go test ./internal/resources -update to create it")
				assert.Equal(t, string(want), string(got), "%s differs; if the change is intended, run go test ./internal/resources -update", golden)
			})
		}
	}
}

// assertRestricted checks the fields the restricted Pod Security Standard
// requires of a pod and each of its containers.
func assertRestricted(t *testing.T, pod *corev1ac.PodSpecApplyConfiguration, uid int64) {
	t.Helper()
	require.NotNil(t, pod.SecurityContext)
	assert.Equal(t, ptr.To(true), pod.SecurityContext.RunAsNonRoot)
	assert.Equal(t, ptr.To(uid), pod.SecurityContext.RunAsUser)
	assert.Equal(t, ptr.To(corev1.SeccompProfileTypeRuntimeDefault), pod.SecurityContext.SeccompProfile.Type)
	require.NotEmpty(t, pod.Containers)
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		require.NotNil(t, sc, "container %s", *c.Name)
		assert.Equal(t, ptr.To(false), sc.AllowPrivilegeEscalation, "container %s", *c.Name)
		assert.Equal(t, ptr.To(true), sc.RunAsNonRoot, "container %s", *c.Name)
		assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop, "container %s", *c.Name)
		assert.Empty(t, sc.Capabilities.Add, "container %s", *c.Name)
		assert.Equal(t, ptr.To(corev1.SeccompProfileTypeRuntimeDefault), sc.SeccompProfile.Type, "container %s", *c.Name)
	}
	for _, v := range pod.Volumes {
		assert.Nil(t, v.HostPath, "volume %s: hostPath is not allowed", *v.Name)
	}
	if pod.ServiceAccountName != nil {
		// the engine pods: their agent holds the primary Lease
		assert.Equal(t, ptr.To(true), pod.AutomountServiceAccountToken, "an engine pod's agent needs its token for the primary Lease")
	} else {
		assert.Equal(t, ptr.To(false), pod.AutomountServiceAccountToken, "no other pod of a Database talks to the Kubernetes API: it gets no token")
	}
}

func TestRestrictedPodSecurity(t *testing.T) {
	eng, err := engine.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	db := samples["default"]
	sts, err := resources.StatefulSet(db, eng, resources.TLSOff, testAgentImage)
	require.NoError(t, err)
	assertRestricted(t, sts.Spec.Template.Spec, eng.User())
	cron, err := resources.BackupCronJob(db, eng, resources.TLSOff)
	require.NoError(t, err)
	assertRestricted(t, cron.Spec.JobTemplate.Spec.Template.Spec, eng.User())
}

func TestCredentialsSecretName(t *testing.T) {
	assert.Equal(t, "orders-credentials", resources.CredentialsSecretName(samples["default"]))
	assert.Equal(t, "billing-owner", resources.CredentialsSecretName(samples["custom"]))
}

// TestStatefulSetUsesSuperuserSecret: the engine pod reads only the
// superuser's Secret (initdb's POSTGRES_USER) and the replication Secret
// (the agent's token and the replication role's password), never the
// application's.
func TestStatefulSetUsesSuperuserSecret(t *testing.T) {
	eng, err := engine.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	for name, db := range samples {
		sts, err := resources.StatefulSet(db, eng, resources.TLSOff, testAgentImage)
		require.NoError(t, err)
		refs := map[string]string{}
		for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				refs[*e.Name] = *e.ValueFrom.SecretKeyRef.Name
			}
		}
		assert.Equal(t, map[string]string{
			"POSTGRES_USER":                 resources.SuperuserSecretName(db),
			"POSTGRES_PASSWORD":             resources.SuperuserSecretName(db),
			agentapi.EnvToken:               resources.ReplicationSecretName(db),
			agentapi.EnvReplicationPassword: resources.ReplicationSecretName(db),
		}, refs, name)
	}
}

func TestImageOverride(t *testing.T) {
	eng, err := engine.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	sts, err := resources.StatefulSet(samples["default"], eng, resources.TLSOff, testAgentImage)
	require.NoError(t, err)
	assert.Equal(t, "docker.io/library/postgres:17.12", *sts.Spec.Template.Spec.Containers[0].Image)
	sts, err = resources.StatefulSet(samples["custom"], eng, resources.TLSOff, testAgentImage)
	require.NoError(t, err)
	assert.Equal(t, "registry.example.com/postgres:15.14@sha256:0123", *sts.Spec.Template.Spec.Containers[0].Image)

	_, err = resources.StatefulSet(sample("x", func(db *dbv1.Database) { db.Spec.Version = "9" }), eng, resources.TLSOff, testAgentImage)
	assert.ErrorContains(t, err, `postgres has no image for version "9"`)
}
