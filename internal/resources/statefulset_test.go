package resources_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

const testAgentImage = "registry.example.com/dbkeeper:1.0"

// TestInstances: the StatefulSet runs spec.replicas pods (default 1, up to
// 9 now that standbys stream from the primary), but never fewer than the
// primary's ordinal + 1, so that a scale-down does not delete the primary
// before the replication controller switched over; 0 stops every pod.
func TestInstances(t *testing.T) {
	eng, err := engine.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	for _, tc := range []struct {
		name            string
		replicas        *int32
		current, target string
		want            int32
	}{
		{name: "default", want: 1},
		{name: "zero", replicas: ptr.To[int32](0), want: 0},
		{name: "three", replicas: ptr.To[int32](3), want: 3},
		{name: "nine", replicas: ptr.To[int32](9), want: 9},
		{name: "primary within", replicas: ptr.To[int32](3), current: "x-1", want: 3},
		{name: "scale-down under the primary", replicas: ptr.To[int32](1), current: "x-2", want: 3},
		{name: "switchover target beyond", replicas: ptr.To[int32](2), current: "x-0", target: "x-4", want: 5},
		{name: "zero stops the primary too", replicas: ptr.To[int32](0), current: "x-2", want: 0},
		{name: "another Database's pod", replicas: ptr.To[int32](1), current: "xy-5", want: 1},
		{name: "not an instance", replicas: ptr.To[int32](1), current: "x-backup", want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := sample("x", func(db *dbv1.Database) {
				db.Spec.Replicas = tc.replicas
				if tc.current != "" || tc.target != "" {
					db.Status.Replication = &dbv1.ReplicationStatus{CurrentPrimary: tc.current, TargetPrimary: tc.target}
				}
			})
			assert.Equal(t, tc.want, resources.Instances(db))
			sts, err := resources.StatefulSet(db, eng, resources.TLSOff, testAgentImage)
			require.NoError(t, err)
			assert.Equal(t, tc.want, *sts.Spec.Replicas)
		})
	}
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
			sts, err := resources.StatefulSet(sample("x", func(db *dbv1.Database) { db.Spec.Resources = tc.resources }), eng, resources.TLSOff, testAgentImage)
			require.NoError(t, err)
			pod := sts.Spec.Template.Spec
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

			// The kubelet probes the agent, which answers while initdb
			// or crash recovery runs: no startup window to outlast.
			c := pod.Containers[0]
			assert.Nil(t, c.StartupProbe)
			require.NotNil(t, c.LivenessProbe)
			require.NotNil(t, c.LivenessProbe.HTTPGet)
			assert.Equal(t, agentapi.HealthPath, *c.LivenessProbe.HTTPGet.Path)
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

	desired, err := resources.StatefulSet(db, eng, resources.TLSOn, testAgentImage)
	require.NoError(t, err)
	// The engine's variables, then the agent's.
	full := engineEnv(t, decode[appsv1.StatefulSet](t, desired))
	agentVars := full[len(eng.Env(resources.SuperuserSecretName(db))):]
	require.NotEmpty(t, agentVars)
	live := decode[appsv1.StatefulSet](t, desired)
	live.Spec.Template.Spec.Containers[0].Env = old
	resources.PinLegacyEnv(desired, live)
	assert.Equal(t, append(slices.Clone(old), agentVars...), engineEnv(t, decode[appsv1.StatefulSet](t, desired)),
		"a legacy StatefulSet keeps its engine env, and gains the agent's")

	desired, err = resources.StatefulSet(db, eng, resources.TLSOn, testAgentImage)
	require.NoError(t, err)
	current := decode[appsv1.StatefulSet](t, desired)
	resources.PinLegacyEnv(desired, current)
	got := engineEnv(t, decode[appsv1.StatefulSet](t, desired))
	assert.Equal(t, full, got, "a current StatefulSet keeps the desired env")
	for _, e := range got {
		assert.NotEqual(t, "POSTGRES_DB", e.Name)
		if e.ValueFrom != nil {
			if e.ValueFrom.SecretKeyRef != nil && strings.HasPrefix(e.Name, "POSTGRES_") {
				assert.Equal(t, "orders-superuser", e.ValueFrom.SecretKeyRef.Name, e.Name)
			}
		}
	}

	desired, err = resources.StatefulSet(db, eng, resources.TLSOn, testAgentImage)
	require.NoError(t, err)
	resources.PinLegacyEnv(desired, nil)
	assert.Equal(t, full, engineEnv(t, decode[appsv1.StatefulSet](t, desired)), "no StatefulSet yet")
}

func secretRef(name, secret, key string, optional bool) corev1.EnvVar {
	ref := &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}
	if optional {
		ref.Optional = ptr.To(true)
	}
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: ref}}
}

// TestRestartRevisionOnTheTemplate: status.configuration.restartRevision
// is an annotation of the pods' template (a new one restarts the
// instances); without one the template has no such annotation, as before
// parameters existed. The restart hash covers it.
func TestRestartRevisionOnTheTemplate(t *testing.T) {
	eng, err := engine.Catalog{}.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	db := sample("x", nil)
	sts, err := resources.StatefulSet(db, eng, resources.TLSOff, testAgentImage)
	require.NoError(t, err)
	assert.NotContains(t, sts.Spec.Template.Annotations, resources.AnnotationRestartRevision)
	before := sts.Spec.Template.Annotations[resources.AnnotationRestartHash]
	assert.NotEmpty(t, before)

	db.Status.Configuration = &dbv1.ConfigurationStatus{RestartRevision: "fa094d537e890b5e"}
	sts, err = resources.StatefulSet(db, eng, resources.TLSOff, testAgentImage)
	require.NoError(t, err)
	assert.Equal(t, "fa094d537e890b5e", sts.Spec.Template.Annotations[resources.AnnotationRestartRevision])
	assert.NotEqual(t, before, sts.Spec.Template.Annotations[resources.AnnotationRestartHash], "a new restart revision restarts")
}

// TestRestartHashLeavesOutTheAgentImage (docs/design/upgrades.md, part
// 1): another agent image changes the template but not its restart hash
// (the agents replace themselves in place); another engine image or
// resources change both.
func TestRestartHashLeavesOutTheAgentImage(t *testing.T) {
	eng, err := engine.Catalog{}.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	db := sample("x", nil)
	hash := func(db *dbv1.Database, agentImage string) (string, string) {
		sts, err := resources.StatefulSet(db, eng, resources.TLSOff, agentImage)
		require.NoError(t, err)
		return sts.Spec.Template.Annotations[resources.AnnotationRestartHash], *sts.Spec.Template.Spec.InitContainers[0].Image
	}
	h1, img1 := hash(db, testAgentImage)
	h2, img2 := hash(db, testAgentImage+"-next")
	assert.NotEqual(t, img1, img2, "the template names the new agent image")
	assert.Equal(t, h1, h2, "no restart for the agent image alone")
	assert.Len(t, h1, 16)

	other := db.DeepCopy()
	other.Spec.Image = "registry.example/postgres:16-custom"
	h3, _ := hash(other, testAgentImage)
	assert.NotEqual(t, h1, h3, "another engine image restarts")
	other = db.DeepCopy()
	other.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("3Gi")}
	h4, _ := hash(other, testAgentImage)
	assert.NotEqual(t, h1, h4, "other resources restart")
}

// TestCustomQueriesMounted: the ConfigMap of spec.monitoring.customQueries
// is mounted read-only, optional, its key as the file the agent reads; a
// Database without one mounts nothing (its pods' template is unchanged).
func TestCustomQueriesMounted(t *testing.T) {
	eng, err := engine.Catalog{}.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	db := sample("x", nil)
	sts, err := resources.StatefulSet(db, eng, resources.TLSOff, testAgentImage)
	require.NoError(t, err)
	for _, v := range sts.Spec.Template.Spec.Volumes {
		assert.Nil(t, v.ConfigMap, "a ConfigMap volume without spec.monitoring.customQueries: %s", *v.Name)
	}

	db.Spec.Monitoring.CustomQueries = &dbv1.CustomQueriesSpec{ConfigMapName: "shop-queries", Key: "pg.yaml"}
	sts, err = resources.StatefulSet(db, eng, resources.TLSOff, testAgentImage)
	require.NoError(t, err)
	var found *corev1ac.ConfigMapVolumeSourceApplyConfiguration
	var name string
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil {
			found, name = v.ConfigMap, *v.Name
		}
	}
	require.NotNil(t, found, "no ConfigMap volume")
	assert.Equal(t, "shop-queries", *found.Name)
	assert.True(t, *found.Optional, "a missing ConfigMap must not keep the pod from starting")
	require.Len(t, found.Items, 1)
	assert.Equal(t, "pg.yaml", *found.Items[0].Key)
	assert.Equal(t, agentapi.CustomQueriesFile, *found.Items[0].Path)
	mounted := false
	for _, m := range sts.Spec.Template.Spec.Containers[0].VolumeMounts {
		if *m.Name == name {
			mounted = true
			assert.Equal(t, agentapi.CustomQueriesDir, *m.MountPath)
			assert.True(t, *m.ReadOnly)
		}
	}
	assert.True(t, mounted, "the engine container mounts the queries")
}
