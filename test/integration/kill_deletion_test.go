package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestKilledDuringDeletionKeepsWhatThePolicyKeeps deletes a Database under
// each policy with an operator that is stopped right after its k-th write
// of the deletion, then lets a fresh operator finish it. Whatever the kill
// point, the policy's table holds afterwards: what it keeps exists with the
// same UID (and the Secret with the same password), what it deletes is
// gone. A calibration deletion counts the n writes of each policy; k then
// takes every value from 1 to n.
func TestKilledDuringDeletionKeepsWhatThePolicyKeeps(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	for _, tc := range policyTable {
		policy := strings.ToLower(string(tc.policy))
		// converge makes a Ready Database of the policy with its data PVC,
		// and returns it with the objects a policy may keep.
		converge := func(t *testing.T, name string) (*dbv1.Database, []client.Object) {
			op := startOperator(t, ns, "*")
			db := convergeReady(t, newDatabase(ns, name, func(d *dbv1.Database) { d.Spec.DeletionPolicy = tc.policy }))
			data := dataPVC(t, db)
			op.WaitQuiet(t, quiet, timeout)
			op.Stop()
			secret := &corev1.Secret{}
			backup := &corev1.PersistentVolumeClaim{}
			require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.GeneratedSecretName(db)}, secret))
			require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.BackupName(db)}, backup))
			return db, []client.Object{data, secret, backup}
		}

		var n int
		t.Run(policy+"/calibrate", func(t *testing.T) {
			db, _ := converge(t, "kd-"+policy+"-calibrate")
			op := startOperator(t, ns, "*")
			require.NoError(t, admin.Delete(ctx, db))
			require.Eventually(t, func() bool { return released(t, db) }, timeout, tick, "the Database was not released")
			n = op.WaitQuiet(t, quiet, timeout)
			t.Logf("an uninterrupted deletion under %s makes %d writes", tc.policy, n)
		})
		require.Greater(t, n, 1, "the calibration deletion made no writes")

		for k := 1; k <= n; k++ {
			t.Run(fmt.Sprintf("%s/k=%d", policy, k), func(t *testing.T) {
				db, objects := converge(t, fmt.Sprintf("kd-%s-%d", policy, k))
				secret := objects[1].(*corev1.Secret)
				passwordBefore := string(secret.Data["password"])

				first := startOperator(t, ns, "*")
				// envtest runs no garbage collector, so propagation means
				// nothing here (the e2e deletion matrix covers it).
				require.NoError(t, admin.Delete(ctx, db))
				stopAfter(t, first, k)

				startOperator(t, ns, "*")
				require.Eventually(t, func() bool { return released(t, db) }, timeout, tick, "the Database was not released")
				for i, keep := range []bool{tc.keepData, tc.keepSecret, tc.keepBack} {
					obj := objects[i].DeepCopyObject().(client.Object)
					uid := obj.GetUID()
					if !keep {
						assert.True(t, gone(t, obj), "%T %s kept, policy %s deletes it", obj, obj.GetName(), tc.policy)
						continue
					}
					require.False(t, gone(t, obj), "%T %s lost, policy %s keeps it", obj, obj.GetName(), tc.policy)
					assert.Equal(t, uid, obj.GetUID(), "%T %s was re-created: its data is not the same", obj, obj.GetName())
				}
				if tc.keepSecret {
					assert.Equal(t, passwordBefore, password(t, ns, secret.Name), "the kept Secret's password changed")
				}
			})
		}
	}
}
