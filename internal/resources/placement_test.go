package resources_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestPlacementDefaults: unset, the instances spread softly over nodes
// and zones (one node still runs them all), counting every pod of the
// Database whatever its revision, and keep the preferred anti-affinity on
// nodes, which spreads them where nodes have no zone label; no toleration,
// node selector or priority class of dbkeeper's own.
func TestPlacementDefaults(t *testing.T) {
	db := sample("orders", nil)
	pod := enginePod(t, db, resources.TLSOff).Spec.Template.Spec

	require.Len(t, pod.TopologySpreadConstraints, 2)
	for i, key := range []string{corev1.LabelHostname, corev1.LabelTopologyZone} {
		c := pod.TopologySpreadConstraints[i]
		assert.Equal(t, key, c.TopologyKey)
		assert.Equal(t, int32(1), c.MaxSkew, key)
		assert.Equal(t, corev1.ScheduleAnyway, c.WhenUnsatisfiable, "%s: a preference, so one node or zone still runs every instance", key)
		assert.Equal(t, &metav1.LabelSelector{MatchLabels: resources.PodSelectorLabels(db)}, c.LabelSelector, "%s: this Database's pods only", key)
		assert.Empty(t, c.MatchLabelKeys, "%s: the old revision's pods count too during a rollout", key)
		assert.Nil(t, c.MinDomains, key)
		assert.Nil(t, c.NodeAffinityPolicy, key)
		assert.Nil(t, c.NodeTaintsPolicy, key)
	}
	require.NotNil(t, pod.Affinity)
	require.NotNil(t, pod.Affinity.PodAntiAffinity, "the anti-affinity stays: spread constraints score nothing on nodes without a zone label")
	assert.Len(t, pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution, 1)

	assert.Empty(t, pod.Tolerations)
	assert.Empty(t, pod.NodeSelector)
	assert.Empty(t, pod.PriorityClassName)
}

// TestPlacementExplicit: the placement fields go to the engine pods as the
// user wrote them; a spread constraint keeps its own labelSelector, and
// one without gets the Database's, since without a selector it would
// count no pod at all.
func TestPlacementExplicit(t *testing.T) {
	toleration := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "database", Effect: corev1.TaintEffectNoSchedule}
	evict := corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](30)}
	own := &metav1.LabelSelector{MatchLabels: map[string]string{"team": "payments"}}
	db := sample("orders", func(db *dbv1.Database) {
		db.Spec.Tolerations = []corev1.Toleration{toleration, evict}
		db.Spec.NodeSelector = map[string]string{"node-role.example.com/database": "", "disk": "nvme"}
		db.Spec.PriorityClassName = "database-critical"
		db.Spec.TopologySpreadConstraints = &[]corev1.TopologySpreadConstraint{
			{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule, MinDomains: ptr.To[int32](3),
				NodeTaintsPolicy: ptr.To(corev1.NodeInclusionPolicyHonor)},
			{MaxSkew: 2, TopologyKey: "example.com/rack", WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: own, MatchLabelKeys: []string{"team-shard"}},
		}
	})
	pod := enginePod(t, db, resources.TLSOff).Spec.Template.Spec

	assert.Equal(t, []corev1.Toleration{toleration, evict}, pod.Tolerations)
	assert.Equal(t, db.Spec.NodeSelector, pod.NodeSelector)
	assert.Equal(t, "database-critical", pod.PriorityClassName)
	assert.Nil(t, pod.Priority, "the API server fills in the class's priority, not dbkeeper")

	require.Len(t, pod.TopologySpreadConstraints, 2)
	zone := (*db.Spec.TopologySpreadConstraints)[0]
	zone.LabelSelector = &metav1.LabelSelector{MatchLabels: resources.PodSelectorLabels(db)}
	assert.Equal(t, zone, pod.TopologySpreadConstraints[0], "no labelSelector: the Database's pods")
	assert.Equal(t, (*db.Spec.TopologySpreadConstraints)[1], pod.TopologySpreadConstraints[1], "the user's own selector and matchLabelKeys are kept")
	assert.Nil(t, (*db.Spec.TopologySpreadConstraints)[0].LabelSelector, "the builder does not write into the Database")

	require.NotNil(t, pod.Affinity, "spec.affinity unset: the default anti-affinity stays beside explicit placement")
	assert.NotNil(t, pod.Affinity.PodAntiAffinity)
}

// TestPlacementEmptySpread: an explicit empty list turns the default
// spread off, where unset keeps it; the difference survives the Database's
// JSON, which is how it reaches the operator from the API server.
func TestPlacementEmptySpread(t *testing.T) {
	db := sample("orders", func(db *dbv1.Database) { db.Spec.TopologySpreadConstraints = &[]corev1.TopologySpreadConstraint{} })
	assert.Empty(t, enginePod(t, db, resources.TLSOff).Spec.Template.Spec.TopologySpreadConstraints, "[]: no spread constraint at all")

	raw, err := json.Marshal(db)
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"topologySpreadConstraints":[]`)
	var back dbv1.Database
	require.NoError(t, json.Unmarshal(raw, &back))
	require.NotNil(t, back.Spec.TopologySpreadConstraints, "[] must not come back as unset")
	assert.Empty(t, enginePod(t, &back, resources.TLSOff).Spec.Template.Spec.TopologySpreadConstraints)

	unset := sample("orders", nil)
	raw, err = json.Marshal(unset)
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "topologySpreadConstraints")
	var fresh dbv1.Database
	require.NoError(t, json.Unmarshal(raw, &fresh))
	assert.Nil(t, fresh.Spec.TopologySpreadConstraints)
	assert.Len(t, enginePod(t, &fresh, resources.TLSOff).Spec.Template.Spec.TopologySpreadConstraints, 2, "unset: the default")
}

// TestPlacementDuplicateSpread: two constraints of one topologyKey and
// whenUnsatisfiable, which admission lets through, make no StatefulSet:
// the error names the Database's field (the API server's own refusal of
// the apply would name none), and the controller gives up on it until the
// Database changes.
func TestPlacementDuplicateSpread(t *testing.T) {
	eng, err := engine.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	db := sample("orders", func(db *dbv1.Database) {
		db.Spec.TopologySpreadConstraints = &[]corev1.TopologySpreadConstraint{
			{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule},
			{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.ScheduleAnyway},
			{MaxSkew: 2, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule},
		}
	})
	_, err = resources.StatefulSet(db, eng, resources.TLSOff, testAgentImage)
	require.Error(t, err)
	assert.Equal(t, `spec.topologySpreadConstraints: two constraints have topologyKey "topology.kubernetes.io/zone" and whenUnsatisfiable DoNotSchedule, `+
		"which a pod refuses: merge them into one", err.Error())
}

// TestPlacementChangesThePodTemplate: every placement field is part of
// the engine pods' template, so a change makes a new StatefulSet revision,
// which the replication controller rolls out in its order (standbys,
// switchover, former primary); rollouts are OnDelete (TestRolloutsAreOnDelete),
// so nothing restarts behind its back.
func TestPlacementChangesThePodTemplate(t *testing.T) {
	base := enginePod(t, sample("orders", nil), resources.TLSOn).Spec.Template
	for name, change := range map[string]func(*dbv1.Database){
		"tolerations": func(db *dbv1.Database) {
			db.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Value: "database"}}
		},
		"nodeSelector": func(db *dbv1.Database) { db.Spec.NodeSelector = map[string]string{"disk": "nvme"} },
		"priorityClassName": func(db *dbv1.Database) {
			db.Spec.PriorityClassName = "database-critical"
		},
		"topologySpreadConstraints []": func(db *dbv1.Database) {
			db.Spec.TopologySpreadConstraints = &[]corev1.TopologySpreadConstraint{}
		},
		"topologySpreadConstraints DoNotSchedule": func(db *dbv1.Database) {
			db.Spec.TopologySpreadConstraints = &[]corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule}}
		},
		"affinity": func(db *dbv1.Database) { db.Spec.Affinity = &corev1.Affinity{} },
	} {
		t.Run(name, func(t *testing.T) {
			changed := enginePod(t, sample("orders", change), resources.TLSOn).Spec.Template
			assert.NotEqual(t, base, changed)
		})
	}
}
