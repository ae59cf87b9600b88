package integration

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/manager"
	"github.com/dbkeeper/dbkeeper/test/framework"
)

// TestChildrenMeetRestrictedPodSecurity creates a Database in a namespace
// that warns on the restricted Pod Security Standard: the operator's writes
// of the StatefulSet and the CronJob draw no warning. A non-compliant pod
// written with the same kind of handler draws one, so the check can fail.
func TestChildrenMeetRestrictedPodSecurity(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   "it-pss-" + rand.String(5),
		Labels: map[string]string{"pod-security.kubernetes.io/warn": "restricted", "pod-security.kubernetes.io/warn-version": "latest"},
	}}
	require.NoError(t, admin.Create(ctx, ns))

	probe := &framework.Recorder{}
	probeCfg := rest.CopyConfig(cfg)
	probeCfg.WarningHandler = probe
	probeClient, err := client.New(probeCfg, client.Options{Scheme: manager.Scheme()})
	require.NoError(t, err)
	bad := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "root"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	require.NoError(t, probeClient.Create(ctx, bad, client.DryRunAll))
	require.NotEmpty(t, probe.All(), "a non-compliant pod drew no warning: the check would be blind")

	before := len(warnings.All())
	startOperator(t, ns.Name, "*")
	createDatabase(t, newDatabase(ns.Name, "strict"))
	require.Eventually(t, func() bool {
		return admin.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "strict"}, &appsv1.StatefulSet{}) == nil &&
			admin.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "strict-backup"}, &batchv1.CronJob{}) == nil
	}, timeout, tick)
	assert.Empty(t, warnings.All()[before:], "the operator's writes drew Pod Security warnings")
}
