package replication

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
)

// applyLabels sets the role label of each pod, or removes it.
func (s *syncer) applyLabels(ctx context.Context, db *dbv1.Database, pods map[string]*corev1.Pod, want map[string]string) error {
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	// Removals first: nobody is selected twice, even for a moment.
	sort.Slice(names, func(i, j int) bool {
		if (want[names[i]] == "") != (want[names[j]] == "") {
			return want[names[i]] == ""
		}
		return names[i] < names[j]
	})
	for _, name := range names {
		pod, role := pods[name], want[name]
		if pod == nil || pod.Labels[dbv1.LabelRole] == role {
			continue
		}
		var err error
		if role == "" {
			patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, dbv1.LabelRole))
			err = s.client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(facet.FieldOwner(Name)))
		} else {
			ac := corev1ac.Pod(pod.Name, pod.Namespace).WithUID(pod.UID).WithLabels(map[string]string{dbv1.LabelRole: role})
			err = s.client.Apply(ctx, ac, client.FieldOwner(facet.FieldOwner(Name)), client.ForceOwnership)
		}
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			continue // gone or replaced: the watch brings it back
		}
		if err != nil {
			return fmt.Errorf("labelling pod %s with role %q: %w", name, role, err)
		}
		log.FromContext(ctx).Info("Labelled pod with its role", "Pod", klog.KObj(pod), "role", role)
		if role == "" {
			role = "none (in doubt)"
		}
		s.writer.Eventf(db, pod, corev1.EventTypeNormal, ReasonRoleLabelled, "Label", "Pod %s: role %s", name, role)
	}
	return nil
}

// act carries out the plan's action: one function per kind. The kinds
// whose status is written first (starts, aborts, the new primary) were
// recorded by recordFirst; act does what remains of them.
func (s *syncer) act(ctx context.Context, db *dbv1.Database, plan *Plan, pods map[string]*corev1.Pod) error {
	a := plan.Action
	pod := pods[a.Pod]
	switch a.Kind {
	case ActBootstrapInitdb, ActBootstrapClone, ActDemote, ActPromote, ActRejoin, ActDeletePod, ActUpgradeAgent:
		if pod == nil {
			return fmt.Errorf("pod %s does not exist", a.Pod)
		}
	}
	switch a.Kind {
	case ActBootstrapInitdb, ActBootstrapClone:
		return s.actBootstrap(ctx, db, plan, pod)
	case ActDemote:
		return s.actDemote(ctx, db, plan, pod)
	case ActPromote:
		return s.actPromote(ctx, db, a, pod, pods)
	case ActRejoin:
		return s.actRejoin(ctx, db, a, pod)
	case ActFinishSwitchover:
		return s.actFinishSwitchover(ctx, db, a, pods)
	case ActFinishFailover:
		s.actFinishFailover(ctx, db, plan, pods)
	case ActRemoveAnnotation:
		return s.removeAnnotation(ctx, db, a.Pod)
	case ActDeletePod:
		return s.actDeletePod(ctx, db, a, pod)
	case ActUpgradeAgent:
		return s.actUpgradeAgent(ctx, db, a, pod)
	}
	return nil
}

// actBootstrap creates the first primary (initdb, or the restore of
// spec.bootstrap.recovery) or clones a standby from the primary.
func (s *syncer) actBootstrap(ctx context.Context, db *dbv1.Database, plan *Plan, pod *corev1.Pod) error {
	a := plan.Action
	req := agentapi.BootstrapRequest{Mode: agentapi.BootstrapClone}
	if a.Kind == ActBootstrapInitdb {
		var err error
		if req, err = s.firstBootstrap(ctx, db); err != nil {
			return err
		}
	}
	if _, err := s.agents.Bootstrap(ctx, db, pod, req); err != nil {
		return err
	}
	switch req.Mode {
	case agentapi.BootstrapInitdb:
		s.writer.Eventf(db, pod, corev1.EventTypeNormal, ReasonBootstrapped, "Bootstrap", "Creating the first primary %s (initdb)", a.Pod)
	case agentapi.BootstrapRestore:
		s.writer.Eventf(db, pod, corev1.EventTypeNormal, ReasonBootstrapped, "Bootstrap", "Creating the first primary %s: recovering %s%s to %s",
			a.Pod, req.Recovery.Repository.Bucket, req.Recovery.Repository.Path, req.Recovery.Target)
	default:
		s.writer.Eventf(db, pod, corev1.EventTypeNormal, ReasonCloning, "Bootstrap", "Cloning standby %s from the primary %s", a.Pod, plan.CurrentPrimary)
	}
	return nil
}

// actDemote demotes a switchover's old primary and records its last
// position at once: the target is promoted only once it replayed up to
// it.
func (s *syncer) actDemote(ctx context.Context, db *dbv1.Database, plan *Plan, pod *corev1.Pod) error {
	resp, err := s.agents.Demote(ctx, db, pod)
	if err != nil {
		return err
	}
	s.writer.Eventf(db, pod, corev1.EventTypeNormal, ReasonDemoted, "Switchover",
		"Demoted the primary %s; its last position is %s", plan.Action.Pod, resp.ShutdownLSN)
	plan.SwitchoverLSN = resp.ShutdownLSN
	return s.writer.ApplyCondition(ctx, db, plan.Condition, statusOf(*plan))
}

// actPromote promotes a switchover's target, or asks a failover's to
// promote (after detaching every other standby from the lost primary),
// again on every poll until it reports being the primary.
func (s *syncer) actPromote(ctx context.Context, db *dbv1.Database, a Action, pod *corev1.Pod, pods map[string]*corev1.Pod) error {
	if a.Failover {
		var others []string
		for name := range pods {
			if prev := db.Status.Replication; prev == nil || name != prev.CurrentPrimary {
				others = append(others, name)
			}
		}
		s.detach(ctx, db, pods, others)
	}
	st, err := s.agents.Promote(ctx, db, pod, agentapi.PromoteRequest{MinReplayedLSN: a.LSN, Failover: a.Failover})
	if err != nil {
		if !a.Failover {
			if goesOn := s.promotionGoesOn(ctx, db, pod); goesOn != "" {
				log.FromContext(ctx).Info("The promotion goes on after its call ended", "pod", a.Pod, "call", err.Error(), "state", goesOn)
				return &inProgress{msg: fmt.Sprintf("%s is %s: its agent follows the promotion to its end", a.Pod, goesOn)}
			}
		}
		return err
	}
	if a.Failover {
		// asked again on every poll until it reports being the primary
		log.FromContext(ctx).V(1).Info("Asked for a failover promotion", "pod", a.Pod, "state", st.State)
		return nil
	}
	s.writer.Eventf(db, pod, corev1.EventTypeNormal, ReasonPromoted, "Switchover",
		"Promoted %s after it replayed up to %s", a.Pod, a.LSN)
	return nil
}

// actRejoin rewinds a standby that diverged from the primary.
func (s *syncer) actRejoin(ctx context.Context, db *dbv1.Database, a Action, pod *corev1.Pod) error {
	if _, err := s.agents.RejoinStandby(ctx, db, pod); err != nil {
		return err
	}
	s.writer.Eventf(db, pod, corev1.EventTypeWarning, ReasonRejoining, "Rejoin",
		"Rewinding %s from the primary: %s", a.Pod, a.Why)
	return nil
}

// took is how long the switchover or failover that just finished took,
// as this manager saw it ("" when it did not see it start).
func (s *syncer) took(db *dbv1.Database) string {
	if v, ok := s.started.LoadAndDelete(db.UID); ok {
		return fmt.Sprintf(" in %s", s.now().Sub(v.(time.Time)).Round(time.Millisecond))
	}
	return ""
}

// actFinishSwitchover reports the finished switchover, reconnects the
// standbys to the new primary and removes the annotation that asked for
// it.
func (s *syncer) actFinishSwitchover(ctx context.Context, db *dbv1.Database, a Action, pods map[string]*corev1.Pod) error {
	took := s.took(db)
	s.writer.Eventf(db, nil, corev1.EventTypeNormal, ReasonSwitchoverCompleted, "Switchover",
		"Switched over from %s to %s at %s%s", a.From, a.Pod, a.LSN, took)
	s.reconnect(ctx, db, pods, a.Pod)
	return s.removeAnnotation(ctx, db, a.Pod)
}

// actFinishFailover reports the finished failover and reconnects the
// standbys to the new primary.
func (s *syncer) actFinishFailover(ctx context.Context, db *dbv1.Database, plan *Plan, pods map[string]*corev1.Pod) {
	a, f := plan.Action, plan.LastFailover
	took := s.took(db)
	s.writer.Eventf(db, nil, corev1.EventTypeWarning, ReasonFailoverCompleted, "Failover",
		"Failed over from %s to %s%s: %s takes writes at %s; %s was last seen at %s, %d bytes of its WAL were not received",
		a.From, a.Pod, took, a.Pod, a.LSN, a.From, orUnknown(f.FromLSN), f.LostBytes)
	s.reconnect(ctx, db, pods, a.Pod)
}

// actDeletePod deletes a pod of a rollout; one gone or replaced already
// is no failure.
func (s *syncer) actDeletePod(ctx context.Context, db *dbv1.Database, a Action, pod *corev1.Pod) error {
	err := s.client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting pod %s: %w", a.Pod, err)
	}
	s.writer.Eventf(db, pod, corev1.EventTypeNormal, ReasonPodDeleted, "RollingUpdate", "Deleted pod %s: %s", a.Pod, a.Why)
	return nil
}

// inProgress is act's answer when the step's call failed but the work it
// asked for goes on (a switchover's promotion that outlasted the call):
// Sync says so and looks again, reporting no failure.
type inProgress struct{ msg string }

func (e *inProgress) Error() string { return e.msg }

// promotionGoesOn says, when a switchover's promote call to pod's agent
// failed (a 409 because the agent is busy promoting, or a call that ended
// before the promotion did, which the agent follows to its end), whether
// the agent, asked again within statusTimeout, promotes still or is
// promoted: "promoting" or "promoted", "" when neither.
func (s *syncer) promotionGoesOn(ctx context.Context, db *dbv1.Database, pod *corev1.Pod) string {
	cctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	st, err := s.agents.Status(cctx, db, pod)
	switch {
	case err != nil:
		return ""
	case st.State == agentapi.StatePromoting:
		return "promoting"
	case st.Role == agentapi.RolePrimary && st.State == agentapi.StateRunning:
		return "promoted"
	}
	return ""
}

// removeAnnotation removes the switchover annotation once it names the
// primary.
func (s *syncer) removeAnnotation(ctx context.Context, db *dbv1.Database, primary string) error {
	v, ok := db.Annotations[dbv1.AnnotationSwitchoverTo]
	if !ok || v != primary {
		return nil
	}
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, dbv1.AnnotationSwitchoverTo))
	if err := s.client.Patch(ctx, db, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(facet.FieldOwner(Name))); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("removing annotation %s: %w", dbv1.AnnotationSwitchoverTo, err))
	}
	return nil
}

// reconnect restarts the WAL receiver of every instance but the new
// primary, once it is labelled (a detach: the receiver starts again after
// wal_retrieve_retry_interval): a receiver that was waiting to connect to
// the read-write Service while no pod had the primary label would wait
// for its connect timeout first. The old primary and instances that are
// not standbys refuse, and are left alone; one that did not answer its
// last status call is not asked.
func (s *syncer) reconnect(ctx context.Context, db *dbv1.Database, pods map[string]*corev1.Pod, primary string) {
	var names []string
	for name := range pods {
		if name != primary && !s.wasSilent(db, name) {
			names = append(names, name)
		}
	}
	s.detach(ctx, db, pods, names)
}

// detach stops the WAL receivers of the standbys named (all at once,
// each within detachTimeout) and returns those whose agent did it: a
// failover detaches them before it ranks them, and again before it
// promotes one, so that a lost primary that was only frozen cannot, on
// waking, send them WAL the new primary never has, nor have a synchronous
// commit confirmed by them. An unreachable standby is not waited for.
func (s *syncer) detach(ctx context.Context, db *dbv1.Database, pods map[string]*corev1.Pod, names []string) map[string]bool {
	detached := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range names {
		pod := pods[name]
		if pod == nil || pod.DeletionTimestamp != nil || pod.Status.PodIP == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			dctx, cancel := context.WithTimeout(ctx, detachTimeout)
			defer cancel()
			if _, err := s.agents.Detach(dctx, db, pod); err != nil {
				log.FromContext(ctx).V(1).Info("Cannot detach a standby before the failover", "pod", name, "err", err.Error())
				return
			}
			mu.Lock()
			detached[name] = true
			mu.Unlock()
		}()
	}
	wg.Wait()
	return detached
}
