package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/zapr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/logging"
	"github.com/dbkeeper/dbkeeper/internal/manager"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
	"github.com/dbkeeper/dbkeeper/test/framework/operator"
)

// TestConvergesThroughInjectedFaults runs the operator with 20 % of its
// writes refused with a conflict and 5 % answered with a server error (half
// of those after the server applied the write), on several Databases at
// once. Every Database converges with one of each child and a password that
// never changed, and once the faults stop, reconcile errors stop and the
// operator goes quiet.
func TestConvergesThroughInjectedFaults(t *testing.T) {
	ns := newNamespace(t)
	passwords := watchPasswords(t, ns)
	faults := &operator.Faults{Conflict: 0.20, ServerError: 0.05, Seed: 6}
	op := operator.Start(t, operatorCfg, operator.Options{
		Namespaces: []string{ns},
		Logger:     logging.Capped(zapr.NewLogger(newCapturingLogger("operator"))),
		Faults:     faults,
	})
	errorsBefore := total(reconcileErrors(t))

	const n = 6
	dbs := make([]*dbv1.Database, n)
	for i := range dbs {
		dbs[i] = createDatabase(t, newDatabase(ns, fmt.Sprintf("faulty-%d", i), func(db *dbv1.Database) {
			if i%2 == 0 {
				db.Spec.Backup.Schedule = "30 4 * * *"
			}
		}))
	}
	// The StatefulSet comes after the engine pods' ServiceAccount, Role,
	// RoleBinding and primary Lease: five writes, each refused a quarter
	// of the time, with the controller's growing backoff between tries;
	// the same minute as Ready below, not the usual 20 s.
	for _, db := range dbs {
		markStatefulSetReadyWithin(t, db, time.Minute)
	}
	for _, db := range dbs {
		dbtest.WaitCondition(t, admin, db, dbv1.ConditionReady, metav1.ConditionTrue, dbv1.ReasonReady, time.Minute)
	}
	conflicts, serverErrors, writes := faults.Injected()
	t.Logf("under faults: %d writes, %d conflicts and %d server errors injected, %v failed reconciles",
		writes, conflicts, serverErrors, total(reconcileErrors(t))-errorsBefore)
	require.Positive(t, conflicts, "no conflict was injected")
	require.Positive(t, serverErrors, "no server error was injected")
	require.Positive(t, total(reconcileErrors(t))-errorsBefore, "the injected faults failed no reconcile: they did not bite")

	faults.Disable()
	op.WaitQuiet(t, quiet, timeout)
	time.Sleep(time.Second) // reconciles already dequeued finish
	errorsSettled, reconcilesSettled := reconcileErrors(t), reconcileCounts(t)
	time.Sleep(3 * time.Second)
	for name, n := range reconcileErrors(t) {
		assert.Equal(t, errorsSettled[name], n, "controller %s kept failing after the faults stopped", name)
	}
	// No controller loops: at most one reconcile per Database in the
	// window. The replication controller polls the agents every 15 s when
	// all is steady; any controller may still run one retry an injected
	// failure had scheduled with backoff (measured: 4 tls reconciles over
	// 6 Databases in 3 s, without a write). A loop, even at a 1 s period,
	// makes three per Database.
	for name, n := range reconcileCounts(t) {
		assert.LessOrEqual(t, n-reconcilesSettled[name], float64(len(dbs)), "controller %s kept reconciling after the faults stopped", name)
	}

	seen := passwords()
	for _, db := range dbs {
		live := getDatabase(t, db)
		dbtest.AssertOneOfEach(t, admin, live)
		assert.Contains(t, live.Finalizers, dbv1.Finalizer)
		name := resources.GeneratedSecretName(db)
		assert.Len(t, seen[name], 1, "Secret %s held more than one password", name)
		assert.Equal(t, password(t, ns, name), seen[name][0])
	}
}

// watchPasswords watches the Secrets of namespace from now on and returns a
// function that lists, per Secret, each distinct password it has held.
func watchPasswords(t *testing.T, namespace string) func() map[string][]string {
	t.Helper()
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: manager.Scheme()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	w, err := wc.Watch(ctx, &corev1.SecretList{}, client.InNamespace(namespace))
	require.NoError(t, err)
	var mu sync.Mutex
	held := map[string][]string{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			sec, ok := ev.Object.(*corev1.Secret)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			p, ok := sec.Data["password"]
			if !ok {
				continue
			}
			mu.Lock()
			if list := held[sec.Name]; len(list) == 0 || list[len(list)-1] != string(p) {
				held[sec.Name] = append(list, string(p))
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.Stop(); cancel(); <-done })
	return func() map[string][]string {
		// A watch event can trail the write it reports by a moment.
		time.Sleep(200 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		out := make(map[string][]string, len(held))
		for k, v := range held {
			out[k] = append([]string(nil), v...)
		}
		return out
	}
}

func total(counts map[string]float64) float64 {
	var sum float64
	for _, n := range counts {
		sum += n
	}
	return sum
}
