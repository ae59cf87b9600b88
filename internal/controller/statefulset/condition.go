package statefulset

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// observe reads the StatefulSetReady condition off the StatefulSet as it
// was before this sync; after a write the rollout has not started yet.
// While replicas are not ready, the engine pods (pods) may say why: see
// diagnose.
// inPlace says every pod runs the template but for the agent's image,
// which their agents take over in place (runsTemplateInPlace): no
// rollout is due.
func observe(db *dbv1.Database, sts *appsv1.StatefulSet, changed bool, pods []corev1.Pod, inPlace bool) metav1.Condition {
	want := resources.Instances(db)
	t := dbv1.ConditionStatefulSetReady
	switch {
	case sts == nil:
		return conditions.False(t, dbv1.ReasonProgressing, "created the StatefulSet; waiting for its pods")
	case changed:
		return conditions.False(t, dbv1.ReasonProgressing, "updated the StatefulSet; waiting for the rollout")
	case sts.Status.ObservedGeneration < sts.Generation:
		return conditions.False(t, dbv1.ReasonProgressing, fmt.Sprintf("waiting for the StatefulSet controller to observe generation %d", sts.Generation))
	case want == 0 && sts.Status.Replicas == 0:
		return conditions.True(t, dbv1.ReasonScaledToZero, "spec.replicas is 0: no pod runs, the data is kept")
	case rollingOut(sts, want) && !inPlace:
		if stuck, ok := diagnose(db, sts.Status.UpdateRevision, pods); ok {
			return stuck
		}
		msg := fmt.Sprintf("rolling out: %d of %d replicas updated", sts.Status.UpdatedReplicas, want)
		if sts.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
			msg += "; the replication controller restarts the others in order (standbys, then the primary after a switchover)"
		}
		return conditions.False(t, dbv1.ReasonProgressing, msg)
	case sts.Status.ReadyReplicas < want:
		if stuck, ok := diagnose(db, sts.Status.UpdateRevision, pods); ok {
			return stuck
		}
		return conditions.False(t, dbv1.ReasonProgressing, fmt.Sprintf("%d of %d replicas ready", sts.Status.ReadyReplicas, want))
	case sts.Status.Replicas > want:
		return conditions.False(t, dbv1.ReasonProgressing, fmt.Sprintf("scaling down: %d replicas, %d wanted", sts.Status.Replicas, want))
	}
	ready := fmt.Sprintf("%d of %d replicas ready", sts.Status.ReadyReplicas, want)
	if eol, past := endOfLife(db); past {
		return conditions.True(t, dbv1.ReasonVersionEndOfLife, ready+"; "+eol)
	}
	return conditions.True(t, dbv1.ReasonStatefulSetReady, ready)
}

// endOfLife says, for a Database whose spec.version is past its end of
// life, what that means and what to do.
func endOfLife(db *dbv1.Database) (string, bool) {
	e, err := engine.For(db.Spec.Engine)
	if err != nil {
		return "", false
	}
	day, past := e.EndOfLife(db.Spec.Version)
	if !past {
		return "", false
	}
	return fmt.Sprintf("%s %s reached its end of life on %s and gets no more fixes, security ones included; "+
		"move the data to a Database of a supported version (%s) with spec.bootstrap.fromBackup from this one's backups "+
		"(docs/user-guide/upgrades.md)", db.Spec.Engine, db.Spec.Version, day, strings.Join(supported(e), ", ")), true
}

// supported lists the versions of e that are not past their end of life.
func supported(e engine.Engine) []string {
	var out []string
	for _, v := range e.Versions() {
		if _, past := e.EndOfLife(v); !past {
			out = append(out, v)
		}
	}
	return out
}

// rollingOut says the StatefulSet has pods of an older revision.
func rollingOut(sts *appsv1.StatefulSet, want int32) bool {
	return sts.Status.UpdatedReplicas < want || (sts.Status.UpdateRevision != "" && sts.Status.CurrentRevision != sts.Status.UpdateRevision)
}

// runsTemplateInPlace says each of the want instances' pods carries the
// template's restart hash (resources.AnnotationRestartHash): they run
// what the template says but, at most, the agent's image, which the
// replication controller brings them in place when the agents take over
// (facet.Options.AgentBinary).
func runsTemplateInPlace(db *dbv1.Database, sts *appsv1.StatefulSet, pods []corev1.Pod, want int32) bool {
	hash := sts.Spec.Template.Annotations[resources.AnnotationRestartHash]
	if hash == "" {
		return false
	}
	current := int32(0)
	for i := range pods {
		ordinal, ok := resources.InstanceOrdinal(db, pods[i].Name)
		if !ok || ordinal >= int(want) {
			continue
		}
		if pods[i].Annotations[resources.AnnotationRestartHash] != hash {
			return false
		}
		current++
	}
	return current == want
}
