package resources_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// decode turns an apply configuration into the core type the API server
// would hold, through JSON as the request does.
func decode[T any](t *testing.T, ac any) *T {
	t.Helper()
	raw, err := json.Marshal(ac)
	require.NoError(t, err)
	out := new(T)
	require.NoError(t, json.Unmarshal(raw, out))
	return out
}

// assertMounts checks that the container mounts every path and its pod has
// the volume of each mount (claims are the StatefulSet's claim templates).
func assertMounts(t *testing.T, pod corev1.PodSpec, claims []corev1.PersistentVolumeClaim, c corev1.Container, paths ...string) {
	t.Helper()
	volumes := map[string]bool{}
	for _, v := range claims {
		volumes[v.Name] = true
	}
	for _, v := range pod.Volumes {
		volumes[v.Name] = true
	}
	for _, p := range paths {
		found := false
		for _, m := range c.VolumeMounts {
			if m.MountPath == p {
				found = true
				assert.True(t, volumes[m.Name], "mount %s of container %s has no volume %s", p, c.Name, m.Name)
			}
		}
		assert.True(t, found, "container %s does not mount %s", c.Name, p)
	}
}

// TestBuildersRenderWhatTheEngineDeclares compares, field for field
// (reflect.DeepEqual), what the engine declares in core/v1 types with what
// the builders' apply configurations send: a field the conversion drops
// (SecretKeyRef.Optional, a probe's handler or threshold) fails here.
func TestBuildersRenderWhatTheEngineDeclares(t *testing.T) {
	eng, err := engine.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	for name, db := range samples {
		t.Run(name, func(t *testing.T) {
			secret := resources.CredentialsSecretName(db)
			ac, err := resources.StatefulSet(db, eng, resources.TLSOff, testAgentImage)
			require.NoError(t, err)
			sts := decode[appsv1.StatefulSet](t, ac)
			pod := sts.Spec.Template.Spec
			require.NotEmpty(t, pod.Containers)
			c := pod.Containers[0]
			engineEnv := eng.Env(resources.SuperuserSecretName(db))
			require.GreaterOrEqual(t, len(c.Env), len(engineEnv))
			assert.Equal(t, engineEnv, c.Env[:len(engineEnv)], "engine env, then the agent's")
			assertMounts(t, pod, sts.Spec.VolumeClaimTemplates, c, append([]string{eng.DataMountPath()}, eng.ScratchMounts()...)...)

			host := resources.ClientServiceHost(db)
			cron, err := resources.BackupCronJob(db, eng, resources.TLSOff)
			require.NoError(t, err)
			ondemand, err := resources.OnDemandBackupJob(db, eng, resources.TLSOff, "token-1")
			require.NoError(t, err)
			final, err := resources.FinalBackupJob(db, eng, resources.TLSOff)
			require.NoError(t, err)
			jobs := map[string]corev1.PodSpec{
				"cronjob":  decode[batchv1.CronJob](t, cron).Spec.JobTemplate.Spec.Template.Spec,
				"ondemand": decode[batchv1.Job](t, ondemand).Spec.Template.Spec,
				"final":    decode[batchv1.Job](t, final).Spec.Template.Spec,
			}
			if restore, err := resources.RestoreJob(db, eng, resources.TLSOff); assert.NoError(t, err) && restore != nil {
				jobs["restore"] = decode[batchv1.Job](t, restore).Spec.Template.Spec
			}
			for kind, pod := range jobs {
				require.Len(t, pod.Containers, 1, kind)
				want := eng.ClientEnv(host, secret)
				if kind == "restore" {
					want = eng.ClientEnv(resources.RestorePodHost(db), secret)
				}
				assert.Equal(t, want, pod.Containers[0].Env, "%s env", kind)
				assertMounts(t, pod, nil, pod.Containers[0], resources.BackupMountPath, "/tmp")
			}
		})
	}
}
