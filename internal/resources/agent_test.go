package resources_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// enginePod is the StatefulSet of db as the API server would store it.
func enginePod(t *testing.T, db *dbv1.Database, tls resources.ServerTLS) *appsv1.StatefulSet {
	t.Helper()
	eng, err := engine.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	ac, err := resources.StatefulSet(db, eng, tls, testAgentImage)
	require.NoError(t, err)
	return decode[appsv1.StatefulSet](t, ac)
}

func envOf(c corev1.Container) map[string]corev1.EnvVar {
	m := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		m[e.Name] = e
	}
	return m
}

// TestEnginePodRunsTheAgent: an init container copies the manager from the
// agent image into an emptyDir, and the engine container runs it as its
// PID 1, the image's entrypoint and the server's arguments after "--";
// the agent gets its name, token, replication password and the primary's
// host, and the kubelet probes the agent, over HTTPS when TLS is on.
func TestEnginePodRunsTheAgent(t *testing.T) {
	for _, tls := range []resources.ServerTLS{resources.TLSOff, resources.TLSOn} {
		sts := enginePod(t, sample("orders", nil), tls)
		pod := sts.Spec.Template.Spec
		require.Len(t, pod.InitContainers, 1)
		initC := pod.InitContainers[0]
		assert.Equal(t, testAgentImage, initC.Image)
		assert.Equal(t, []string{"/manager", "copy-self", agentapi.BinDir}, initC.Command)
		require.NotNil(t, initC.SecurityContext)
		assert.True(t, *initC.SecurityContext.ReadOnlyRootFilesystem)
		assert.False(t, *initC.SecurityContext.AllowPrivilegeEscalation)
		assert.NotNil(t, initC.Resources.Limits.Memory())

		require.Len(t, pod.Containers, 1)
		c := pod.Containers[0]
		assert.Equal(t, []string{agentapi.Binary, "agent", "--", "docker-entrypoint.sh"}, c.Command)
		require.NotEmpty(t, c.Args)
		assert.Equal(t, "postgres", c.Args[0], "the image's entrypoint runs the server")
		assert.Contains(t, c.Args, "wal_log_hints=on")
		if tls {
			assert.Contains(t, c.Args, "ssl=on")
		} else {
			assert.NotContains(t, c.Args, "ssl=on")
		}

		// The binary's volume is mounted where both containers expect it.
		var bin string
		for _, v := range pod.Volumes {
			if v.EmptyDir != nil {
				for _, m := range initC.VolumeMounts {
					if m.Name == v.Name && m.MountPath == agentapi.BinDir {
						bin = v.Name
					}
				}
			}
		}
		require.NotEmpty(t, bin, "no emptyDir mounted at %s in the init container", agentapi.BinDir)
		// writable: a new build of the agent is received and renamed there
		assert.Contains(t, c.VolumeMounts, corev1.VolumeMount{Name: bin, MountPath: agentapi.BinDir})

		env := envOf(c)
		assert.Equal(t, "metadata.name", env[agentapi.EnvPodName].ValueFrom.FieldRef.FieldPath)
		assert.Equal(t, corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "orders-replication"}, Key: resources.AgentTokenKey},
			*env[agentapi.EnvToken].ValueFrom.SecretKeyRef)
		assert.Equal(t, corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "orders-replication"}, Key: resources.ReplicationPasswordKey},
			*env[agentapi.EnvReplicationPassword].ValueFrom.SecretKeyRef)
		assert.Equal(t, "orders.shop.svc", env[agentapi.EnvPrimaryHost].Value)

		if tls {
			dir, ok := env[agentapi.EnvTLSDir]
			require.True(t, ok, "no %s with TLS", agentapi.EnvTLSDir)
			assert.Contains(t, c.VolumeMounts, corev1.VolumeMount{Name: "tls", MountPath: dir.Value, ReadOnly: true}, "the directory is the certificate's")
			var files []string
			for _, v := range pod.Volumes {
				if v.Name == "tls" {
					for _, src := range v.Projected.Sources {
						if src.Secret != nil {
							for _, item := range src.Secret.Items {
								files = append(files, item.Path)
							}
						}
					}
				}
			}
			assert.ElementsMatch(t, []string{"tls.crt", "tls.key", "ca.crt"}, files)
			assert.NotContains(t, env, agentapi.EnvAPITLSDir)
		} else {
			assert.NotContains(t, env, agentapi.EnvTLSDir, "plaintext")
			// the agent's endpoint serves the Database's certificate
			// still: its token never travels in clear
			dir, ok := env[agentapi.EnvAPITLSDir]
			require.True(t, ok, "no %s without the server's TLS", agentapi.EnvAPITLSDir)
			assert.Contains(t, c.VolumeMounts, corev1.VolumeMount{Name: "agent-tls", MountPath: dir.Value, ReadOnly: true})
			var files []string
			for _, v := range pod.Volumes {
				if v.Name == "agent-tls" {
					assert.Equal(t, "orders-tls", v.Secret.SecretName)
					for _, item := range v.Secret.Items {
						files = append(files, item.Path)
					}
				}
			}
			assert.ElementsMatch(t, []string{"tls.crt", "tls.key", "ca.crt"}, files)
		}
		assert.Contains(t, c.Ports, corev1.ContainerPort{Name: agentapi.PortName, ContainerPort: agentapi.Port, Protocol: corev1.ProtocolTCP})
		for probe, path := range map[*corev1.Probe]string{c.ReadinessProbe: agentapi.ReadyPath, c.LivenessProbe: agentapi.HealthPath} {
			require.NotNil(t, probe)
			assert.Equal(t, &corev1.HTTPGetAction{Path: path, Port: intstr.FromString(agentapi.PortName), Scheme: corev1.URISchemeHTTPS}, probe.HTTPGet)
			assert.Nil(t, probe.Exec, "no pg_isready: the agent owns the server")
		}
		assert.Nil(t, c.StartupProbe)
	}
}

// TestRolloutsAreOnDelete: a changed template restarts no pod by itself;
// the replication controller restarts them in order.
func TestRolloutsAreOnDelete(t *testing.T) {
	sts := enginePod(t, sample("orders", nil), resources.TLSOn)
	assert.Equal(t, appsv1.OnDeleteStatefulSetStrategyType, sts.Spec.UpdateStrategy.Type)
	assert.Nil(t, sts.Spec.UpdateStrategy.RollingUpdate)
}

// TestAffinity: by default the pods of one Database prefer different
// nodes (and still all schedule on a single node); spec.affinity replaces
// that default whole.
func TestAffinity(t *testing.T) {
	db := sample("orders", nil)
	got := enginePod(t, db, resources.TLSOff).Spec.Template.Spec.Affinity
	require.NotNil(t, got)
	require.NotNil(t, got.PodAntiAffinity)
	assert.Empty(t, got.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, "preferred only: one node still runs them all")
	require.Len(t, got.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution, 1)
	term := got.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0]
	assert.Equal(t, corev1.LabelHostname, term.PodAffinityTerm.TopologyKey)
	assert.Equal(t, resources.PodSelectorLabels(db), term.PodAffinityTerm.LabelSelector.MatchLabels, "this Database's pods only")

	own := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a", "b"}}}}}}}}
	db = sample("orders", func(db *dbv1.Database) { db.Spec.Affinity = own })
	assert.Equal(t, own, enginePod(t, db, resources.TLSOff).Spec.Template.Spec.Affinity)
}

// TestVolumeSizeChangesNoPodTemplate: the engine pod's template does not
// depend on spec.storage.size (the agent sizes max_slot_wal_keep_size from
// the volume it finds), so growing a volume restarts no instance. Found
// when the integration suite's resize left the StatefulSet at a new
// generation: the cap was a server argument computed from the size.
func TestVolumeSizeChangesNoPodTemplate(t *testing.T) {
	sized := func(size string) *dbv1.Database {
		return sample("orders", func(db *dbv1.Database) { q := resource.MustParse(size); db.Spec.Storage.Size = &q })
	}
	assert.Equal(t, enginePod(t, sized("1Gi"), resources.TLSOn).Spec.Template, enginePod(t, sized("20Gi"), resources.TLSOn).Spec.Template)
}
