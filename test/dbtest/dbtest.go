// Package dbtest holds what tests that drive Databases through an API
// server share: a minimal valid Database, reading one back, waiting for a
// condition, patching.
package dbtest

import (
	"context"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// Tick is how often Wait functions look.
const Tick = 50 * time.Millisecond

// New is a minimal valid Database; mutate tweaks it before it is used.
func New(namespace, name string, mutate ...func(*dbv1.Database)) *dbv1.Database {
	db := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       dbv1.DatabaseSpec{Engine: dbv1.EnginePostgres, Version: "17"},
	}
	for _, m := range mutate {
		m(db)
	}
	return db
}

// Get reads the Database as stored now.
func Get(t require.TestingT, c client.Client, db *dbv1.Database) *dbv1.Database {
	got := &dbv1.Database{}
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(db), got))
	return got
}

// WaitCondition waits until the condition has the status and reason at the
// Database's current generation, and returns it.
func WaitCondition(t require.TestingT, c client.Client, db *dbv1.Database, condType string, status metav1.ConditionStatus, reason string, timeout time.Duration) metav1.Condition {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	var got metav1.Condition
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		live := Get(ct, c, db)
		cond := meta.FindStatusCondition(live.Status.Conditions, condType)
		if !assert.NotNil(ct, cond, "condition %s not reported yet", condType) {
			return
		}
		assert.Equal(ct, status, cond.Status, "%s status (message %q)", condType, cond.Message)
		assert.Equal(ct, reason, cond.Reason, "%s reason (message %q)", condType, cond.Message)
		assert.Equal(ct, live.Generation, cond.ObservedGeneration, "%s observedGeneration", condType)
		got = *cond
	}, timeout, Tick)
	return got
}

// Patch applies mutate to the live Database with a merge patch and returns
// the result.
func Patch(t require.TestingT, c client.Client, db *dbv1.Database, mutate func(*dbv1.Database)) *dbv1.Database {
	live := Get(t, c, db)
	patch := client.MergeFrom(live.DeepCopy())
	mutate(live)
	require.NoError(t, c.Patch(context.Background(), live, patch))
	return live
}
