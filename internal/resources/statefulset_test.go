package resources_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestOneInstanceAtMost: a Database stored with replicas above one (before
// the CRD refused it) runs one instance, never independent servers behind
// one Service; 0 and 1 are what they say.
func TestOneInstanceAtMost(t *testing.T) {
	eng, err := engine.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	for asked, want := range map[int32]int32{0: 0, 1: 1, 3: 1, 9: 1} {
		sts, err := resources.StatefulSet(sample("x", func(db *dbv1.Database) { db.Spec.Replicas = ptr.To(asked) }), eng, resources.TLSOff)
		require.NoError(t, err)
		assert.Equal(t, want, *sts.Spec.Replicas, "spec.replicas %d", asked)
	}
	sts, err := resources.StatefulSet(sample("x", func(db *dbv1.Database) { db.Spec.Replicas = nil }), eng, resources.TLSOff)
	require.NoError(t, err)
	assert.Equal(t, int32(1), *sts.Spec.Replicas, "the default")
}

func volume(pod *corev1ac.PodSpecApplyConfiguration, name string) *corev1ac.VolumeApplyConfiguration {
	for i := range pod.Volumes {
		if *pod.Volumes[i].Name == name {
			return &pod.Volumes[i]
		}
	}
	return nil
}

// TestEnginePodUnderLoad: the engine pod has a memory-backed /dev/shm (the
// runtime's 64 MiB makes parallel queries fail), sized to the memory limit
// when there is one; an hour of startup for crash recovery; and no
// ServiceAccount token, since PostgreSQL never talks to the Kubernetes API.
func TestEnginePodUnderLoad(t *testing.T) {
	eng, err := engine.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		resources corev1.ResourceRequirements
		sizeLimit *resource.Quantity
	}{
		"no limit":       {},
		"memory limit":   {corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}}, ptr.To(resource.MustParse("2Gi"))},
		"cpu limit only": {corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			sts, err := resources.StatefulSet(sample("x", func(db *dbv1.Database) { db.Spec.Resources = tc.resources }), eng, resources.TLSOff)
			require.NoError(t, err)
			pod := sts.Spec.Template.Spec
			assert.Equal(t, ptr.To(false), pod.AutomountServiceAccountToken)
			shm := volume(pod, "shm")
			require.NotNil(t, shm, "no shm volume")
			require.NotNil(t, shm.EmptyDir)
			assert.Equal(t, ptr.To(corev1.StorageMediumMemory), shm.EmptyDir.Medium)
			assert.Equal(t, tc.sizeLimit, shm.EmptyDir.SizeLimit)
			var mounted bool
			for _, m := range pod.Containers[0].VolumeMounts {
				mounted = mounted || (*m.Name == "shm" && *m.MountPath == "/dev/shm")
			}
			assert.True(t, mounted, "shm is not mounted at /dev/shm")

			probe := pod.Containers[0].StartupProbe
			window := time.Duration(*probe.PeriodSeconds*(*probe.FailureThreshold)) * time.Second
			assert.GreaterOrEqual(t, window, time.Hour, "crash recovery of a large database is restarted after %s", window)
		})
	}
}

// TestPinLegacyEnv: a StatefulSet made before issue 17 (POSTGRES_* read the
// application's credentials Secret, with POSTGRES_DB) keeps exactly its
// environment, so the upgrade restarts no pod; a new StatefulSet, or one
// already reading the superuser Secret, gets the desired environment.
func TestPinLegacyEnv(t *testing.T) {
	eng, err := engine.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	db := sample("orders", nil)
	creds := resources.CredentialsSecretName(db)
	old := []corev1.EnvVar{
		secretRef("POSTGRES_USER", creds, "username", false),
		secretRef("POSTGRES_PASSWORD", creds, "password", false),
		secretRef("POSTGRES_DB", creds, "database", true),
		{Name: "PGDATA", Value: "/var/lib/postgresql/data/pgdata"},
	}
	engineEnv := func(t *testing.T, sts *appsv1.StatefulSet) []corev1.EnvVar {
		require.Len(t, sts.Spec.Template.Spec.Containers, 1)
		return sts.Spec.Template.Spec.Containers[0].Env
	}

	desired, err := resources.StatefulSet(db, eng, resources.TLSOn)
	require.NoError(t, err)
	live := decode[appsv1.StatefulSet](t, desired)
	live.Spec.Template.Spec.Containers[0].Env = old
	resources.PinLegacyEnv(desired, live)
	assert.Equal(t, old, engineEnv(t, decode[appsv1.StatefulSet](t, desired)), "a legacy StatefulSet keeps its env")

	desired, err = resources.StatefulSet(db, eng, resources.TLSOn)
	require.NoError(t, err)
	current := decode[appsv1.StatefulSet](t, desired)
	resources.PinLegacyEnv(desired, current)
	got := engineEnv(t, decode[appsv1.StatefulSet](t, desired))
	assert.Equal(t, eng.Env(resources.SuperuserSecretName(db)), got, "a current StatefulSet keeps the desired env")
	for _, e := range got {
		assert.NotEqual(t, "POSTGRES_DB", e.Name)
		if e.ValueFrom != nil {
			assert.Equal(t, "orders-superuser", e.ValueFrom.SecretKeyRef.Name, e.Name)
		}
	}

	desired, err = resources.StatefulSet(db, eng, resources.TLSOn)
	require.NoError(t, err)
	resources.PinLegacyEnv(desired, nil)
	assert.Equal(t, eng.Env(resources.SuperuserSecretName(db)), engineEnv(t, decode[appsv1.StatefulSet](t, desired)), "no StatefulSet yet")
}

func secretRef(name, secret, key string, optional bool) corev1.EnvVar {
	ref := &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}
	if optional {
		ref.Optional = ptr.To(true)
	}
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: ref}}
}
