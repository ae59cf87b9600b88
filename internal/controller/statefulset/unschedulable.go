package statefulset

import (
	"fmt"
	"regexp"
	"strings"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// schedulerMessage is the scheduler's message on an unschedulable pod, in
// its two parts: what the filters said of the nodes ("0/3 nodes are
// available: 1 node(s) had untolerated taint(s), 2 Insufficient cpu.")
// and what preemption said ("preemption: 0/3 nodes are available: 1
// Preemption is not helpful for scheduling, 2 No preemption victims found
// for incoming pod."). filters and preemption are lower-cased for
// matching, since the wording's case has moved between releases; raw is
// the filters' part as written, for quoting.
type schedulerMessage struct {
	raw, filters, preemption string
}

func parseSchedulerMessage(message string) schedulerMessage {
	raw, preemption := message, ""
	if i := strings.Index(strings.ToLower(message), "preemption:"); i >= 0 {
		raw, preemption = message[:i], message[i:]
	}
	return schedulerMessage{raw: raw, filters: strings.ToLower(raw), preemption: strings.ToLower(preemption)}
}

// says reports whether the filters gave one of the phrases as a reason.
func (m schedulerMessage) says(phrases ...string) bool {
	for _, p := range phrases {
		if strings.Contains(m.filters, p) {
			return true
		}
	}
	return false
}

// unschedulableReason is one reason the scheduler gives for nodes that
// refuse a pod, told by phrases of its message, and what to change about
// it.
type unschedulableReason struct {
	phrases []string
	fix     func(db *dbv1.Database, m schedulerMessage) string
}

// unschedulableReasons are the scheduler's reasons dbkeeper knows, in the
// order their fixes are given. The phrases are the scheduler plugins' own
// words (k8s.io/kubernetes pkg/scheduler/framework/plugins), older
// releases' included: NodeResourcesFit "Insufficient cpu", TaintToleration
// "node(s) had untolerated taint {key: value}" (newer releases say
// "...taint(s)" without naming it, older ones "node(s) had taint {key:
// value}, that the pod didn't tolerate"), NodeAffinity "node(s) didn't match Pod's node
// affinity/selector", PodTopologySpread "node(s) didn't match pod
// topology spread constraints" (with " (missing required label)" when a
// node lacks the topology key), InterPodAffinity "node(s) didn't match pod
// anti-affinity rules", "...pod affinity rules" and "node(s) didn't
// satisfy existing pods anti-affinity rules", NodeUnschedulable "node(s)
// were unschedulable", and the volume plugins' messages.
var unschedulableReasons = []unschedulableReason{
	{[]string{"persistentvolumeclaim", "volume"}, func(db *dbv1.Database, _ schedulerMessage) string {
		return fmt.Sprintf("check the data PVC %s: fix spec.storage (storageClassName, size) so that it can be bound", resources.DataPVCName(db, 0))
	}},
	{[]string{"insufficient "}, roomFix},
	{[]string{"too many pods"}, func(*dbv1.Database, schedulerMessage) string {
		return "add nodes: some run as many pods as they may (Too many pods)"
	}},
	{[]string{"untolerated taint", "that the pod didn't tolerate"}, taintFix},
	{[]string{"match pod's node affinity", "match pod's node selector", "match node selector"}, nodeSelectorFix},
	{[]string{"pod topology spread constraints"}, spreadFix},
	{[]string{"didn't match pod anti-affinity rules"}, func(*dbv1.Database, schedulerMessage) string {
		return "the required pod anti-affinity of spec.affinity leaves no node for this pod: add nodes in other topology domains, or make it preferred"
	}},
	{[]string{"didn't match pod affinity rules"}, func(*dbv1.Database, schedulerMessage) string {
		return "the required pod affinity of spec.affinity matches no node: fix spec.affinity, or first run the pods it asks for"
	}},
	{[]string{"existing pods anti-affinity rules"}, func(*dbv1.Database, schedulerMessage) string {
		return "the anti-affinity of pods already running keeps this pod off some nodes: that is their spec, or add nodes"
	}},
	{[]string{"were unschedulable"}, func(*dbv1.Database, schedulerMessage) string {
		return "some nodes are cordoned: uncordon them (kubectl uncordon) once their maintenance is done, or add nodes"
	}},
}

// unschedulableFix names the Database fields behind the scheduler's
// message. The message counts the nodes per reason they refused the pod,
// and each reason is a different set of nodes: removing any one of them
// makes room, so the fix names one field per reason the message gives,
// in the order of unschedulableReasons, and says something general only
// when it knows none of them.
func unschedulableFix(db *dbv1.Database, message string) string {
	m := parseSchedulerMessage(message)
	var fixes []string
	for _, r := range unschedulableReasons {
		if m.says(r.phrases...) {
			fixes = append(fixes, r.fix(db, m))
		}
	}
	if len(fixes) == 0 {
		return "no node accepts the pod (taints, affinity or capacity): add or free a node"
	}
	return strings.Join(fixes, "; ")
}

// roomFix is what to do about nodes without room for the requests: lower
// them, add nodes, or, when preemption found nothing to evict, a priority
// class that ranks the pods above those holding the room.
func roomFix(db *dbv1.Database, m schedulerMessage) string {
	fix := "lower spec.resources.requests, or add nodes with room for them"
	class := db.Spec.PriorityClassName
	switch {
	case strings.Contains(m.preemption, "preemptionpolicy=never"):
		if class == "" {
			return fix + ", or set spec.priorityClassName to a PriorityClass that may preempt (the pods' class has preemptionPolicy Never)"
		}
		return fix + fmt.Sprintf(", or set spec.priorityClassName to a PriorityClass that may preempt (%s has preemptionPolicy Never)", class)
	case strings.Contains(m.preemption, "no preemption victims"):
		if class == "" {
			return fix + ", or set spec.priorityClassName to a PriorityClass above the pods that hold the room, so that the engine pods may preempt them"
		}
		return fix + fmt.Sprintf(", or set spec.priorityClassName to a PriorityClass above %s and the pods that hold the room, so that the engine pods may preempt them", class)
	}
	return fix
}

// namedTaint finds the taints older schedulers name: "taint {key: value}".
var namedTaint = regexp.MustCompile(`taint (\{[^{}]*\})`)

// taintFix is what to do about tainted nodes. The taint may keep the pod
// off nodes it was never meant for (the control plane's), so the fix is
// conditional; only older schedulers name the taints.
func taintFix(_ *dbv1.Database, m schedulerMessage) string {
	var taints []string
	for _, t := range namedTaint.FindAllStringSubmatch(m.raw, -1) {
		taints = append(taints, t[1])
	}
	which := "kubectl describe nodes shows their taints"
	if len(taints) > 0 {
		which = strings.Join(taints, ", ")
	}
	return fmt.Sprintf("if the tainted nodes are meant for the Database, tolerate their taint in spec.tolerations (%s)", which)
}

// nodeSelectorFix is what to do about nodes without the labels the pod
// requires: the fields of the Database that require them.
func nodeSelectorFix(db *dbv1.Database, _ schedulerMessage) string {
	var fields []string
	if len(db.Spec.NodeSelector) > 0 {
		fields = append(fields, "spec.nodeSelector")
	}
	if a := db.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		fields = append(fields, "spec.affinity.nodeAffinity")
	}
	if len(fields) == 0 {
		return "no node has the labels the pod's node selector requires, and spec.nodeSelector and spec.affinity are unset: " +
			"the selector comes from the namespace (scheduler.alpha.kubernetes.io/node-selector) or an admission webhook"
	}
	return fmt.Sprintf("fix %s, or label the nodes meant for the Database: no other node matches", strings.Join(fields, " and "))
}

// spreadFix is what to do about a spread constraint the pod would break.
// The default constraints are ScheduleAnyway, which never refuses a node,
// so this is about the user's DoNotSchedule ones.
func spreadFix(_ *dbv1.Database, m schedulerMessage) string {
	if strings.Contains(m.filters, "missing required label") {
		return "a DoNotSchedule constraint of spec.topologySpreadConstraints needs its topologyKey label on every node the pod may use: " +
			"label the nodes, or make the constraint ScheduleAnyway"
	}
	return "placing the pod would break the maxSkew of a DoNotSchedule constraint of spec.topologySpreadConstraints: " +
		"add nodes in the domains that lack an instance, raise maxSkew, or make the constraint ScheduleAnyway"
}
