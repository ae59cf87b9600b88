// Package dbtest holds what tests that drive Databases through an API
// server share: a minimal valid Database, reading one back, waiting for a
// condition, patching.
package dbtest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
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

// AssertOneOfEach checks the Database has exactly one of each child
// (StatefulSet, two Services, generated Secret, CronJob, backup PVC), each
// controlled by it.
func AssertOneOfEach(t *testing.T, c client.Client, db *dbv1.Database) {
	t.Helper()
	ctx := context.Background()
	sel := client.MatchingLabels{resources.LabelInstance: db.Name, resources.LabelManagedBy: resources.ManagedBy}
	backupPVC := map[string]string{resources.LabelComponent: resources.ComponentBackup}
	lists := []struct {
		kind string
		list client.ObjectList
		want int
		more client.MatchingLabels
	}{
		{"StatefulSet", &appsv1.StatefulSetList{}, 1, nil},
		{"Service", &corev1.ServiceList{}, 2, nil},
		{"Secret", &corev1.SecretList{}, 1, nil},
		{"CronJob", &batchv1.CronJobList{}, 1, nil},
		{"backup PersistentVolumeClaim", &corev1.PersistentVolumeClaimList{}, 1, backupPVC},
	}
	for _, l := range lists {
		opts := []client.ListOption{client.InNamespace(db.Namespace), sel}
		if l.more != nil {
			opts = append(opts, l.more)
		}
		require.NoError(t, c.List(ctx, l.list, opts...))
		items, err := meta.ExtractList(l.list)
		require.NoError(t, err)
		assert.Len(t, items, l.want, "%s children of %s", l.kind, db.Name)
		for _, item := range items {
			obj, err := meta.Accessor(item)
			require.NoError(t, err)
			ref := metav1.GetControllerOfNoCopy(obj)
			if assert.NotNil(t, ref, "%s %s has no controller", l.kind, obj.GetName()) {
				assert.Equal(t, db.UID, ref.UID, "%s %s controller", l.kind, obj.GetName())
			}
		}
	}
}
