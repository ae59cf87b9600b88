package replication

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// agentRefusalTTL is how long an agent that refused the manager's build
// is left before it is sent the build again: a refusal while an
// operation runs (a base backup, a restart) clears by then; one of a
// failed check costs one transfer per period.
const agentRefusalTTL = 2 * time.Minute

// agentRefusal is an agent's last refusal of a build.
type agentRefusal struct {
	// sum is the refused build's SHA-256.
	sum, why string
	at       time.Time
}

// actUpgradeAgent sends the agent of pod the manager's build, which it
// checks and replaces itself with, its server running on. A refusal
// (409; 404 from an agent without the endpoint) is remembered for
// agentRefusalTTL and told in an Event, not returned: the Database is
// fine, and the next reconciles must not send the build again at once.
func (s *syncer) actUpgradeAgent(ctx context.Context, db *dbv1.Database, a Action, pod *corev1.Pod) error {
	if s.binary == nil {
		return nil
	}
	ans, err := s.agents.PushBinary(ctx, db, pod, *s.binary)
	var refusal *agentapi.Error
	if errors.As(err, &refusal) && (refusal.Code == http.StatusConflict || refusal.Code == http.StatusNotFound) {
		s.refused.Store(pod.UID, agentRefusal{sum: s.binary.SHA256, why: refusal.Message, at: s.now()})
		s.writer.Eventf(db, pod, corev1.EventTypeWarning, ReasonAgentUpgradeRefused, "UpgradeAgent",
			"The agent of %s did not take build %s: %s; sent again in %s", a.Pod, s.binary.Name(), refusal.Message, agentRefusalTTL)
		return nil
	}
	if err != nil {
		return fmt.Errorf("sending build %s to the agent of %s: %w", s.binary.Name(), a.Pod, err)
	}
	s.refused.Delete(pod.UID)
	s.writer.Eventf(db, pod, corev1.EventTypeNormal, ReasonAgentUpgraded, "UpgradeAgent",
		"The agent of %s replaces itself in place: build %s to %s; PostgreSQL runs on", a.Pod, ans.From, ans.Version)
	return nil
}

// agentRefusals are the pods whose agent refused the manager's build
// within agentRefusalTTL, with why.
func (s *syncer) agentRefusals(pods map[string]*corev1.Pod) map[string]string {
	out := map[string]string{}
	for name, pod := range pods {
		v, ok := s.refused.Load(pod.UID)
		if !ok {
			continue
		}
		r := v.(agentRefusal)
		if r.sum != s.binary.SHA256 || s.now().Sub(r.at) > agentRefusalTTL {
			s.refused.Delete(pod.UID)
			continue
		}
		out[name] = r.why
	}
	return out
}
