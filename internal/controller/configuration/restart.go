package configuration

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// inPlace chooses the instance to restart in place, if any: one that
// still waits for a restart although its pod runs the current template
// (the rollout is done, so no template change will restart it). That
// happens when a standby-floor setting (max_connections and the four
// others) was lowered: the standbys restarted with the primary's higher
// value, so the primary, wherever it now runs, must restart first with
// the new one; then the standbys, whose floor dropped. Standbys go first
// (no write unavailability), the primary only when no standby waits. Only
// when the Database is steady: every instance answered, ReplicationReady
// True (no switchover, failover or rollout running), and the pods carry
// revision. done says which pod was already restarted for which pending
// set, so that a parameter that stays pending after its restart does not
// restart the instance again and again.
func inPlace(db *dbv1.Database, pods []*corev1.Pod, answers []answer, want int, revision string, done map[string]string) (pod *corev1.Pod, pending []string) {
	if len(answers) != want || !steady(db) {
		return nil, nil
	}
	byName := map[string]*corev1.Pod{}
	for _, p := range pods {
		byName[p.Name] = p
	}
	primary := ""
	if db.Status.Replication != nil {
		primary = db.Status.Replication.CurrentPrimary
	}
	var primaryWaits *corev1.Pod
	var primaryPending []string
	for _, a := range answers {
		p := byName[a.pod]
		if a.err != nil || p == nil {
			return nil, nil
		}
		if p.Annotations[resources.AnnotationRestartRevision] != revision {
			return nil, nil // the rollout restarts it
		}
		if len(a.res.PendingRestart) == 0 || done[string(p.UID)] == key(a.res.PendingRestart) {
			continue
		}
		if a.pod == primary {
			primaryWaits, primaryPending = p, a.res.PendingRestart
			continue
		}
		return p, a.res.PendingRestart
	}
	return primaryWaits, primaryPending
}

// steady says whether the Database's replication is steady: one primary,
// every standby streaming, no rollout running.
func steady(db *dbv1.Database) bool {
	c := meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionReplicationReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == dbv1.ReasonReplicating
}

// key names a set of pending parameters.
func key(pending []string) string {
	return strings.Join(slices.Sorted(slices.Values(pending)), ",")
}
