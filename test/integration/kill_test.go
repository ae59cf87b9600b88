package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
	"github.com/dbkeeper/dbkeeper/test/framework/operator"
)

// stopAfter stops the operator as soon as it has made k writes, or once it
// has been quiet for a while with fewer.
func stopAfter(t *testing.T, op *operator.Operator, k int) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last, n := time.Now(), 0
	for op.Writes.Len() < k && time.Since(last) < quiet {
		require.True(t, time.Now().Before(deadline), "the operator kept writing without reaching %d writes", k)
		time.Sleep(time.Millisecond)
		if m := op.Writes.Len(); m != n {
			last, n = time.Now(), m
		}
	}
	op.Stop()
}

// TestKilledAfterAnyWriteConverges stops the operator right after its k-th
// write to a new Database, starts a fresh one, and checks it converges with
// one of each child, each controlled by the Database, the finalizer, and
// the first password. A calibration run counts the n writes of an
// uninterrupted convergence; 30 runs then kill at k = 1..n in turn, so every
// write is a kill point, most of them twice.
func TestKilledAfterAnyWriteConverges(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()

	calibrate := startOperator(t, ns, "*")
	createDatabase(t, newDatabase(ns, "kill-calibrate"))
	n := calibrate.WaitQuiet(t, quiet, timeout)
	calibrate.Stop()
	require.Greater(t, n, 5, "an uninterrupted convergence made only %d writes", n)
	t.Logf("an uninterrupted convergence (StatefulSet not ready) makes %d writes", n)

	for run := range 30 {
		k := run%n + 1
		t.Run(fmt.Sprintf("run=%d/k=%d", run, k), func(t *testing.T) {
			// a namespace per run: the operators of a run see its
			// Database only, not the ones every earlier run left (with
			// 25 of them a restarted operator needed more than the
			// wait to reach the new one)
			ns := newNamespace(t)
			first := startOperator(t, ns, "*")
			db := createDatabase(t, newDatabase(ns, fmt.Sprintf("kill-%d", run)))
			// The number of writes of a convergence varies a little with
			// timing; a run that converges in fewer than k is killed after
			// its last write.
			stopAfter(t, first, k)
			secretName := resources.GeneratedSecretName(db)
			before := ""
			if sec := (&corev1.Secret{}); admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: secretName}, sec) == nil {
				before = string(sec.Data["password"])
			}

			startOperator(t, ns, "*")
			markStatefulSetReady(t, db)
			waitCondition(t, db, dbv1.ConditionReady, "True", dbv1.ReasonReady)
			live := getDatabase(t, db)
			assert.Contains(t, live.Finalizers, dbv1.Finalizer)
			if before != "" {
				assert.Equal(t, before, password(t, ns, secretName), "password changed across the kill")
			}
			dbtest.AssertOneOfEach(t, admin, live)
		})
	}
}
