package replication

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
)

// fallBack ends a switchover whose target has not promoted within
// transitionTimeout of the old primary's demotion: the former primary,
// when it answers and has the newest data, is promoted back, else the most
// advanced standby left (failover rules, and only with failover enabled).
// Either is recorded as a failover from the target, which never became
// the primary: currentPrimary names it until the promotion is done, and
// the promotion takes the primary lease as a failover's does, so a target
// that did promote and vanished cannot run beside it.
func fallBack(p *Plan, v *view, why string) {
	in, db := v.in, v.in.DB
	old, target := p.CurrentPrimary, p.TargetPrimary
	from, final := p.SwitchoverLSN, p.SwitchoverLSN != ""
	if !final {
		from = lastPrimaryLSN(v.st, v.byName[old])
	}
	stuck := fmt.Sprintf("the switchover from %s to %s did not finish: it waited %s for %s", old, target, transitionTimeout, why)
	c := chooseTarget(in, p.SystemID, chooseArgs{exclude: []string{target}, from: from, fromTimeline: primaryTimeline(db, v.byName[old], old),
		prefer: old, final: final})
	if c.refusal != "" {
		p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonFailoverRefused, stuck+"; no instance can take over: "+c.refusal)
		return
	}
	if c.best.Name != old && !db.Spec.FailoverEnabled() {
		p.Condition = conditions.False(dbv1.ConditionReplicationReady, dbv1.ReasonFailoverRefused, fmt.Sprintf(
			"%s; %s cannot be promoted back and spec.highAvailability.failover is false, so %s is not promoted instead", stuck, old, c.best.Name))
		return
	}
	if in.Detached == nil {
		detachFirst(p, in, []string{target}, stuck)
		return
	}
	reason := stuck + "; " + old + " has the newest data and is promoted back"
	if c.best.Name != old {
		reason = fmt.Sprintf("%s; %s is the most advanced instance left", stuck, c.best.Name)
	}
	p.CurrentPrimary = target
	p.PrimaryLostSince = &metav1.Time{Time: in.Now}
	startFailover(p, in, c.best, c.position, from, reason)
	p.Action.EventReason = ReasonSwitchoverFellBack
}
