package e2e

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/cluster"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
)

// endpoints counts the addresses the EndpointSlices of a Service publish.
func endpoints(t require.TestingT, ns, service string) int {
	slices := &discoveryv1.EndpointSliceList{}
	require.NoError(t, k8s.List(context.Background(), slices, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: service}))
	n := 0
	for _, s := range slices.Items {
		n += len(s.Endpoints)
	}
	return n
}

// selects reports whether the Service's selector picks the pod.
func selects(svc *corev1.Service, pod *corev1.Pod) bool {
	return len(svc.Spec.Selector) > 0 && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels))
}

// withSource runs an operator in a new namespace with a Ready Database
// "src" that consents to restores into its namespace, and returns the namespace and a maker of Databases bootstrapped
// from src's backups (none scheduled in the test's lifetime).
func withSource(t *testing.T) (string, func(name string) *dbv1.Database) {
	t.Helper()
	ns := newNamespace(t)
	startOperator(t, ns)
	source := newDatabase(ns, "src", func(d *dbv1.Database) { d.Spec.Backup.Schedule = "0 0 1 1 *" })
	require.NoError(t, k8s.Create(context.Background(), source))
	waitReady(t, source)
	dbtest.AllowRestoresInto(t, k8s, source, ns)
	return ns, func(name string) *dbv1.Database {
		return newDatabase(ns, name, func(d *dbv1.Database) {
			d.Spec.Backup.Schedule = "0 0 1 1 *"
			d.Spec.Bootstrap = &dbv1.BootstrapSpec{FromBackup: &dbv1.BootstrapFromBackup{Database: "src"}}
		})
	}
}

// TestBootstrapRestoreGuards: until spec.bootstrap's restore has finished,
// the client Service selects no pod (the restore Job reaches the server
// through the headless Service); a restore whose pod exits with
// engine.RestoreRefusedExitCode (the data volume holds data) fails at once,
// without retries, and says RestoreRefused.
func TestBootstrapRestoreGuards(t *testing.T) {
	ns, bootstrapped := withSource(t)
	ctx := context.Background()
	eng, err := engine.For(dbv1.EnginePostgres)
	require.NoError(t, err)

	// The restore Job dbkeeper makes, its pod made to exit as the restore
	// command does when the database already holds data.
	taken := bootstrapped("taken")
	desired, err := resources.RestoreJob(taken, eng, resources.TLSOff)
	require.NoError(t, err)
	raw, err := json.Marshal(desired)
	require.NoError(t, err)
	refusing := &batchv1.Job{}
	require.NoError(t, json.Unmarshal(raw, refusing))
	refusing.OwnerReferences = nil // the Database does not exist yet
	refusing.Spec.Template.Labels[cluster.OutcomeLabel] = cluster.OutcomeFail
	refusing.Spec.Template.Labels[cluster.ExitCodeLabel] = strconv.Itoa(engine.RestoreRefusedExitCode)
	require.NoError(t, k8s.Create(ctx, refusing))
	require.NoError(t, k8s.Create(ctx, taken))

	cond := waitCondition(t, taken, dbv1.ConditionBackupReady, metav1.ConditionFalse, dbv1.ReasonRestoreRefused)
	assert.Contains(t, cond.Message, "data-taken-0")
	assert.Contains(t, cond.Message, "taken-restore")
	waitCondition(t, taken, dbv1.ConditionReady, metav1.ConditionFalse, dbv1.ReasonRestoreRefused)
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(refusing), refusing))
	assert.Equal(t, int32(1), refusing.Status.Failed, "a refused restore was retried")

	// Its pod runs and is Ready, but the client Service selects it not.
	pod := &corev1.Pod{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "taken-0"}, pod))
		assert.True(c, podReady(pod), "pod taken-0 is not Ready")
	}, timeout, tick)
	svc := &corev1.Service{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "taken"}, svc))
	assert.False(t, selects(svc, pod), "the client Service selects the pod before the restore finished: %v", svc.Spec.Selector)
	headless := &corev1.Service{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "taken-headless"}, headless))
	assert.True(t, selects(headless, pod), "the headless Service does not select the pod")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 1, endpoints(c, ns, "taken-headless"), "endpoints of the headless Service")
	}, timeout, tick)
	assert.Equal(t, 0, endpoints(t, ns, "taken"), "endpoints of the client Service")
	serviceReady := waitCondition(t, taken, dbv1.ConditionServiceReady, metav1.ConditionTrue, dbv1.ReasonWaitingForRestore)
	assert.Contains(t, serviceReady.Message, "restore")

	// A restore that succeeds opens the client Service, and only then.
	copied := bootstrapped("copy")
	copied.Spec.DeletionPolicy = dbv1.DeletionPolicyRetain
	require.NoError(t, k8s.Create(ctx, copied))
	live := waitReady(t, copied)
	require.NotNil(t, live.Status.Backup)
	assert.Equal(t, "src/latest", live.Status.Backup.RestoredFrom)
	job := &batchv1.Job{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "copy-restore"}, job))
	env := map[string]string{}
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	assert.Equal(t, "copy-0.copy-headless."+ns+".svc", env["PGHOST"], "the restore goes through the client Service")
	waitCondition(t, copied, dbv1.ConditionServiceReady, metav1.ConditionTrue, dbv1.ReasonServicesReady)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "copy-0"}, pod))
		require.NoError(c, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "copy"}, svc))
		assert.True(c, selects(svc, pod), "the client Service does not select the pod after the restore: %v", svc.Spec.Selector)
		assert.Equal(c, 1, endpoints(c, ns, "copy"), "endpoints of the client Service")
	}, timeout, tick)

	// Re-created without its status (Velero, GitOps), over the Retained
	// volume: the restore Job runs again with the restore command, which
	// finds its mark in the data and touches nothing (proven against a real
	// server by engine's TestRestoreOnlyIntoAFreshDatabase); the client
	// Service waits for it again.
	require.NoError(t, k8s.Delete(ctx, copied))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(copied), &dbv1.Database{})), "Database still there")
		assert.True(c, apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "copy-restore"}, &batchv1.Job{})), "restore Job not collected")
	}, timeout, tick)
	again := bootstrapped("copy")
	require.NoError(t, k8s.Create(ctx, again))
	live = waitReady(t, again)
	assert.Equal(t, "src/latest", live.Status.Backup.RestoredFrom)
	rerun := &batchv1.Job{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "copy-restore"}, rerun))
	assert.NotEqual(t, job.UID, rerun.UID)
	c := rerun.Spec.Template.Spec.Containers[0]
	assert.Equal(t, eng.RestoreCommand(resources.BackupMountPath, "src", "latest"), append(c.Command, c.Args...))
}
