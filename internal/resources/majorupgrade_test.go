package resources_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// liveStatefulSet is a StatefulSet as the API server returns it after
// resources.UpgradingStatefulSet was applied.
func liveStatefulSet(t *testing.T, db *dbv1.Database, up *resources.MajorUpgrade) *appsv1.StatefulSet {
	t.Helper()
	eng, err := engine.Catalog{}.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	desired, err := resources.UpgradingStatefulSet(db, eng, resources.TLSOff, testAgentImage, up)
	require.NoError(t, err)
	return resources.ViaJSON[appsv1.StatefulSet](desired)
}

// TestMajorUpgradeOf: a raised spec.version starts an upgrade from the
// major and image the StatefulSet runs; the template keeps it while
// spec.version stays; a lower version, the same one, or a StatefulSet
// without the annotation carry none.
func TestMajorUpgradeOf(t *testing.T) {
	db := sample("x", func(d *dbv1.Database) { d.Spec.Version = "17" })
	live := liveStatefulSet(t, db, nil)
	assert.Equal(t, "17", live.Annotations[resources.AnnotationEngineVersion])
	assert.Nil(t, resources.MajorUpgradeOf(db, live), "the same version")
	assert.Nil(t, resources.MajorUpgradeOf(db, nil), "no StatefulSet yet")

	raised := db.DeepCopy()
	raised.Spec.Version = "18"
	up := resources.MajorUpgradeOf(raised, live)
	require.NotNil(t, up)
	assert.Equal(t, resources.MajorUpgrade{From: "17", FromImage: live.Spec.Template.Spec.Containers[0].Image}, *up)

	upgrading := liveStatefulSet(t, raised, up)
	assert.Equal(t, map[string]string{resources.AnnotationEngineVersion: "18", resources.AnnotationUpgradeFrom: "17"}, upgrading.Annotations)
	assert.Equal(t, up, resources.MajorUpgradeOf(raised, upgrading), "kept while spec.version stays")

	lowered := db.DeepCopy()
	lowered.Spec.Version = "15"
	assert.Nil(t, resources.MajorUpgradeOf(lowered, live), "no upgrade to a lower major")
	assert.Nil(t, resources.MajorUpgradeOf(db, upgrading), "back to the old major after a failure: none")

	before := live.DeepCopy()
	before.Annotations = nil
	assert.Nil(t, resources.MajorUpgradeOf(raised, before), "a StatefulSet made before the annotation runs spec.version")
}

// TestUpgradingTemplate: the pods of an upgrade copy the old major's
// server in an init container of the old image (the agent binary, copied
// first, runs there), mount it read-only beside the data, and tell the
// agent both majors.
func TestUpgradingTemplate(t *testing.T) {
	db := sample("x", func(d *dbv1.Database) { d.Spec.Version = "18" })
	sts := liveStatefulSet(t, db, &resources.MajorUpgrade{From: "17", FromImage: "registry.example/postgres:17.12"})
	pod := sts.Spec.Template.Spec
	require.Len(t, pod.InitContainers, 2)
	assert.Equal(t, resources.AgentContainer, pod.InitContainers[0].Name, "the agent is copied first: the old image runs it")
	old := pod.InitContainers[1]
	assert.Equal(t, resources.OldEngineContainer, old.Name)
	assert.Equal(t, "registry.example/postgres:17.12", old.Image)
	assert.Equal(t, []string{agentapi.Binary, agentapi.CopyEngineCommand, "17", agentapi.OldEngineDir}, old.Command)
	assert.True(t, *old.SecurityContext.RunAsNonRoot)
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range old.VolumeMounts {
		mounts[m.Name] = m
	}
	assert.True(t, mounts[resources.DataVolumeName].ReadOnly, "it reads PG_VERSION only")
	assert.True(t, mounts["agent-bin"].ReadOnly)
	assert.False(t, mounts["old-engine"].ReadOnly)

	engine := pod.Containers[0]
	env := map[string]string{}
	for _, e := range engine.Env {
		env[e.Name] = e.Value
	}
	assert.Equal(t, "17", env[agentapi.EnvUpgradeFrom])
	assert.Equal(t, "18", env[agentapi.EnvUpgradeTo])
	assert.Contains(t, engine.VolumeMounts, corev1.VolumeMount{Name: "old-engine", MountPath: agentapi.OldEngineDir, ReadOnly: true})

	plain := liveStatefulSet(t, db, nil)
	assert.Len(t, plain.Spec.Template.Spec.InitContainers, 1, "no upgrade: no second init container")
	assert.NotEqual(t, plain.Spec.Template.Annotations[resources.AnnotationRestartHash], sts.Spec.Template.Annotations[resources.AnnotationRestartHash])
}
