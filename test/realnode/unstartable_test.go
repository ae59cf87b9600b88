package realnode

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
)

// TestUnstartableIsReported: a Database whose image cannot be pulled (no
// registry is reachable from the node, so any image not built here) or
// whose memory limit is too small for the server says so, naming the
// field to fix, and never goes Ready.
func TestUnstartableIsReported(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startOperator(t, ns)
	cases := []struct {
		name, reason, field string
		mutate              func(*dbv1.Database)
	}{
		// the official image, which this machine may never pull: containerd
		// is pointed at a closed port on loopback for every registry
		{"no-image", dbv1.ReasonImagePullFailed, "spec.image", func(d *dbv1.Database) {
			d.Spec.Image = "docker.io/library/postgres:15.14"
		}},
		{"too-little-memory", dbv1.ReasonOutOfMemory, "spec.resources.limits.memory", func(d *dbv1.Database) {
			small := resource.MustParse("12Mi")
			d.Spec.Resources = corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: small},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: small},
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := newDatabase(ns, tc.name, "15", tc.mutate)
			create(t, db)
			cond := waitCondition(t, db, dbv1.ConditionStatefulSetReady, metav1.ConditionFalse, tc.reason)
			assert.Contains(t, cond.Message, tc.field, "the message names the field to fix")
			if tc.name == "no-image" {
				assert.Contains(t, cond.Message, "127.0.0.1:9", "the pull went to the closed port on loopback, not to a registry")
			}
			t.Logf("StatefulSetReady: %s", cond.Message)
			assert.Eventually(t, func() bool {
				ready := meta.FindStatusCondition(dbtest.Get(t, k8s, db).Status.Conditions, dbv1.ConditionReady)
				return ready != nil && ready.Status == metav1.ConditionFalse && strings.Contains(ready.Message, cond.Message)
			}, timeout, 200*time.Millisecond, "Ready is False and says why")
			// it stays so: no pod of it becomes Ready
			time.Sleep(5 * time.Second)
			got := dbtest.Get(t, k8s, db)
			assert.False(t, meta.IsStatusConditionTrue(got.Status.Conditions, dbv1.ConditionReady))
			for _, p := range podsOf(t, db) {
				assert.False(t, podReady(&p), "pod %s Ready", p.Name)
			}
		})
	}
}
