package realnode

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/controller/secret"
	"github.com/dbkeeper/dbkeeper/internal/controller/statefulset"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
)

// preAgentStatefulSet is the StatefulSet dbkeeper made before it had
// replication (issue 17): the engine runs the image's entrypoint itself,
// no agent, exec probes, rolling updates, and its pod carries no role
// label.
func preAgentStatefulSet(t *testing.T, db *dbv1.Database) *appsv1.StatefulSet {
	t.Helper()
	eng, err := images.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	desired, err := resources.StatefulSet(db, eng, resources.TLSOff, local.ManagerImage())
	require.NoError(t, err)
	raw, err := json.Marshal(desired)
	require.NoError(t, err)
	sts := &appsv1.StatefulSet{}
	require.NoError(t, json.Unmarshal(raw, sts))
	pod := &sts.Spec.Template.Spec
	pod.InitContainers = nil
	// no ServiceAccount of its own and no token: the agent's Lease came
	// with issue 19
	pod.ServiceAccountName, pod.AutomountServiceAccountToken = "", ptr.To(false)
	// nor the agent's certificate (TLS off: it came with issue 29)
	var volumes []corev1.Volume
	for _, v := range pod.Volumes {
		if v.Name != resources.AgentContainer && v.Name != resources.AgentTLSVolume {
			volumes = append(volumes, v)
		}
	}
	pod.Volumes = volumes
	c := &pod.Containers[0]
	c.Command = nil // the image's entrypoint, with "postgres -c ..." as its arguments
	var env []corev1.EnvVar
	for _, e := range c.Env {
		if !strings.HasPrefix(e.Name, "DBKEEPER_") {
			env = append(env, e)
		}
	}
	c.Env = env
	var mounts []corev1.VolumeMount
	for _, m := range c.VolumeMounts {
		if m.Name != resources.AgentContainer && m.Name != resources.AgentTLSVolume {
			mounts = append(mounts, m)
		}
	}
	c.VolumeMounts = mounts
	c.Ports = c.Ports[:1]
	isReady := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
		Command: []string{"pg_isready", "--quiet", "--host=127.0.0.1", "--port=5432"}}}, PeriodSeconds: 2}
	c.ReadinessProbe, c.LivenessProbe, c.StartupProbe = isReady, nil, nil
	sts.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType}
	sts.Spec.Template.Spec.Affinity = nil
	return sts
}

// TestPreAgentDatabaseUpgrade: a Database whose pod dbkeeper made before
// it had replication keeps its rows and its client Service across the
// upgrade: the new operator labels that pod primary at once (<name> now
// selects the role), then restarts it once onto the agent.
func TestPreAgentDatabaseUpgrade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := newNamespace(t)
	db := newDatabase(ns, "before", "17")
	create(t, db)
	password, err := secret.NewPassword()
	require.NoError(t, err)
	create(t, resources.SuperuserSecret(db, "postgres", password))
	// applied as the previous operator's statefulset controller applied
	// it: with its field manager, whose fields this operator's apply
	// then replaces
	sts := preAgentStatefulSet(t, db)
	sts.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"}
	require.NoError(t, k8s.Patch(ctx, sts, client.Apply, client.FieldOwner(facet.FieldOwner(statefulset.Name)), client.ForceOwnership))
	key := client.ObjectKey{Namespace: ns, Name: resources.InstanceName(db, 0)}
	pod := &corev1.Pod{}
	require.Eventually(t, func() bool { return k8s.Get(ctx, key, pod) == nil && podReady(pod) }, timeout, time.Second,
		"the pre-agent pod Ready")
	require.True(t, resources.PodPredatesAgent(pod), "the pod runs without the agent")
	old := pod.UID
	super := func(pod *corev1.Pod) sqlconn.Target {
		return sqlconn.Target{Host: pod.Status.PodIP, Port: 5432, User: "postgres", Password: password, Database: "postgres", SSLMode: "disable"}
	}
	sqlValue(t, super(pod), "CREATE TABLE precious AS SELECT g AS id FROM generate_series(1, 500) g")
	const precious = "SELECT count(*) || '|' || sum(id) FROM precious"
	before := sqlValue(t, super(pod), precious)

	t.Log("the new operator takes over")
	startOperator(t, ns)
	live := waitReady(t, db)
	conn := generated(db)
	fillItems(t, conn)
	require.NoError(t, k8s.Get(ctx, key, pod))
	assert.NotEqual(t, old, pod.UID, "the pod was restarted onto the agent")
	assert.False(t, resources.PodPredatesAgent(pod), "the pod runs the agent")
	assert.Equal(t, dbv1.RolePrimary, pod.Labels[dbv1.LabelRole])
	assert.Equal(t, key.Name, live.Status.Replication.CurrentPrimary)
	assert.Equal(t, rows, countItems(t, conn))
	assert.Equal(t, before, sqlValue(t, super(pod), precious), "the rows written before the upgrade")
}
