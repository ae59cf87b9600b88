package statefulset

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
)

// TestUnschedulableFix: each reason the scheduler gives is mapped to the
// Database field to fix. The messages are the scheduler's own, as
// kube-scheduler writes them into the pod's PodScheduled condition (the
// plugins' reasons in k8s.io/kubernetes pkg/scheduler/framework/plugins,
// the FitError's "0/N nodes are available: " and preemption's part),
// across the releases that worded them differently.
func TestUnschedulableFix(t *testing.T) {
	withSelector := func(db *dbv1.Database) {
		db.Spec.NodeSelector = map[string]string{"node-role.example.com/database": ""}
	}
	withNodeAffinity := func(db *dbv1.Database) {
		db.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{}}}
	}
	withClass := func(db *dbv1.Database) { db.Spec.PriorityClassName = "database" }
	cases := []struct {
		name    string
		mutate  func(*dbv1.Database)
		message string
		want    []string
		notWant []string
	}{
		{
			name:    "a taint the scheduler names",
			message: "0/3 nodes are available: 3 node(s) had untolerated taint {dedicated: db}. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
			want:    []string{"if the tainted nodes are meant for the Database, tolerate their taint in spec.tolerations ({dedicated: db})"},
			notWant: []string{"spec.resources", "spec.priorityClassName"},
		},
		{
			name: "taints of today's scheduler, which does not name them, beside a node selector",
			message: "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 node(s) didn't match Pod's node affinity/selector. " +
				"no new claims to deallocate, preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
			mutate: withSelector,
			want: []string{
				"tolerate their taint in spec.tolerations (kubectl describe nodes shows their taints)",
				"; fix spec.nodeSelector, or label the nodes meant for the Database",
			},
		},
		{
			name:    "an older scheduler's taint",
			message: "0/2 nodes are available: 2 node(s) had taint {dedicated: db}, that the pod didn't tolerate.",
			want:    []string{"spec.tolerations ({dedicated: db})"},
		},
		{
			name:    "node affinity and node selector both",
			mutate:  func(db *dbv1.Database) { withSelector(db); withNodeAffinity(db) },
			message: "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
			want:    []string{"fix spec.nodeSelector and spec.affinity.nodeAffinity"},
		},
		{
			name:    "node affinity only",
			mutate:  withNodeAffinity,
			message: "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
			want:    []string{"fix spec.affinity.nodeAffinity, or label"},
			notWant: []string{"spec.nodeSelector"},
		},
		{
			name:    "a node selector the Database did not set",
			message: "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
			want:    []string{"spec.nodeSelector and spec.affinity are unset", "scheduler.alpha.kubernetes.io/node-selector"},
		},
		{
			name:    "a DoNotSchedule spread constraint",
			message: "0/3 nodes are available: 3 node(s) didn't match pod topology spread constraints. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.",
			want:    []string{"maxSkew of a DoNotSchedule constraint of spec.topologySpreadConstraints"},
			notWant: []string{"spec.priorityClassName"},
		},
		{
			name: "nodes without the spread constraint's topology key",
			message: "0/3 nodes are available: 3 node(s) didn't match pod topology spread constraints (missing required label). " +
				"preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
			want: []string{"spec.topologySpreadConstraints needs its topologyKey label on every node"},
		},
		{
			name:    "room, and no pod of a lower priority to preempt",
			message: "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.",
			want: []string{"lower spec.resources.requests, or add nodes with room for them, " +
				"or set spec.priorityClassName to a PriorityClass above the pods that hold the room, so that the engine pods may preempt them"},
		},
		{
			name:    "room, with a priority class already",
			mutate:  withClass,
			message: "0/3 nodes are available: 3 Insufficient memory. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.",
			want:    []string{"a PriorityClass above database and the pods that hold the room"},
		},
		{
			name:    "room, and a class that may not preempt",
			mutate:  withClass,
			message: "0/1 nodes are available: 1 Insufficient cpu. no new claims to deallocate, preemption: not eligible due to preemptionPolicy=Never.",
			want:    []string{"spec.resources.requests", "a PriorityClass that may preempt (database has preemptionPolicy Never)"},
		},
		{
			name: "room on some nodes, the control plane's taint on another",
			message: "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 2 Insufficient memory. " +
				"preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod.",
			want: []string{
				"lower spec.resources.requests, or add nodes with room for them, or set spec.priorityClassName",
				"; if the tainted nodes are meant for the Database, tolerate their taint in spec.tolerations ({node-role.kubernetes.io/control-plane: })",
			},
		},
		{
			name: "a required anti-affinity with fewer nodes than instances",
			message: "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 node(s) didn't match pod anti-affinity rules. " +
				"no new claims to deallocate, preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod.",
			want:    []string{"the required pod anti-affinity of spec.affinity leaves no node", "spec.tolerations"},
			notWant: []string{"spec.priorityClassName"},
		},
		{
			name:    "a required pod affinity",
			message: "0/6 nodes are available: 3 node(s) didn't match pod affinity rules, 3 node(s) had untolerated taint(s).",
			want:    []string{"the required pod affinity of spec.affinity matches no node"},
		},
		{
			name:    "cordoned nodes",
			message: "0/2 nodes are available: 2 node(s) were unschedulable. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.",
			want:    []string{"some nodes are cordoned: uncordon them"},
		},
		{
			name:    "an unbound claim",
			message: "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
			want:    []string{"check the data PVC data-orders-0: fix spec.storage"},
		},
		{
			name:    "a volume in another zone",
			message: "0/3 nodes are available: 3 node(s) had volume node affinity conflict. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
			want:    []string{"fix spec.storage"},
			notWant: []string{"spec.nodeSelector", "spec.affinity"},
		},
		{
			name:    "a reason dbkeeper does not know",
			message: "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports.",
			want:    []string{"no node accepts the pod (taints, affinity or capacity): add or free a node"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := facettest.Database()
			if tc.mutate != nil {
				tc.mutate(db)
			}
			got := unschedulableFix(db, tc.message)
			for _, w := range tc.want {
				assert.Contains(t, got, w)
			}
			for _, w := range tc.notWant {
				assert.NotContains(t, got, w)
			}
		})
	}
}
