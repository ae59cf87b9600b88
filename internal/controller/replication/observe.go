package replication

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// observe reads the pods and the StatefulSet and asks every pod's agent,
// all at once, each within statusTimeout; while the current primary's
// agent does not answer it also reads the primary Lease. lostNow are
// primaries found lost in this reconcile: asked briefly.
func (s *syncer) observe(ctx context.Context, db *dbv1.Database, lostNow ...string) (Input, map[string]*corev1.Pod, error) {
	pods, count, sts, err := s.readPods(ctx, db)
	if err != nil {
		return Input{}, nil, err
	}
	in := Input{DB: db, Now: s.now()}
	if sts != nil {
		in.UpdateRevision, in.RestartHash = sts.Status.UpdateRevision, sts.Spec.Template.Annotations[resources.AnnotationRestartHash]
		in.EngineVersion, in.UpgradeFrom = sts.Annotations[resources.AnnotationEngineVersion], sts.Annotations[resources.AnnotationUpgradeFrom]
	}
	in.Instances = make([]Instance, count)
	s.askAll(ctx, db, in.Instances, pods, s.brief(db, count, lostNow))
	if err := s.readNodes(ctx, in.Instances, pods); err != nil {
		return Input{}, nil, err
	}
	in.PrimaryLease = s.watchLeaseOfSilentPrimary(ctx, db, in.Instances)
	in.SwitchoverWaitSince = s.switchoverWait(db)
	if v, ok := s.settled.Load(db.UID); ok {
		in.SettledAt = v.(time.Time)
	}
	in.SyncApplied = s.syncApplied(db, in.Instances)
	if s.binary != nil {
		in.AgentBuild = s.binary
		in.AgentRefused = s.agentRefusals(pods)
	}
	return in, pods, nil
}

// readPods lists db's pods by name, how many instances there are
// (spec.replicas, or more while a pod of a higher ordinal exists), and the
// StatefulSet (nil when there is none).
func (s *syncer) readPods(ctx context.Context, db *dbv1.Database) (map[string]*corev1.Pod, int, *appsv1.StatefulSet, error) {
	list := &corev1.PodList{}
	if err := s.client.List(ctx, list, client.InNamespace(db.Namespace), client.MatchingLabels(resources.PodSelectorLabels(db))); err != nil {
		return nil, 0, nil, fmt.Errorf("listing the pods: %w", err)
	}
	sts, err := apply.Live(ctx, s.client, client.ObjectKey{Namespace: db.Namespace, Name: resources.StatefulSetName(db)}, &appsv1.StatefulSet{})
	if err != nil {
		return nil, 0, nil, fmt.Errorf("getting StatefulSet %s: %w", resources.StatefulSetName(db), err)
	}
	pods := map[string]*corev1.Pod{}
	count := replicas(db)
	for i := range list.Items {
		pod := &list.Items[i]
		if ord, ok := resources.InstanceOrdinal(db, pod.Name); ok {
			pods[pod.Name] = pod
			count = max(count, ord+1)
		}
	}
	return pods, count, sts, nil
}

// brief are the instances asked within lostStatusTimeout, as each step
// would wait statusTimeout for them: a primary already found lost (or
// being failed over), and, while a failover or switchover runs or has
// just ended, any other instance that did not answer last time (a frozen
// target, the frozen old primary).
func (s *syncer) brief(db *dbv1.Database, count int, lostNow []string) map[string]bool {
	brief := map[string]bool{}
	for _, name := range lostNow {
		brief[name] = true
	}
	r := db.Status.Replication
	if r == nil {
		return brief
	}
	lostPrimary := r.PrimaryLostSince != nil || failingOver(r)
	if lostPrimary {
		brief[r.CurrentPrimary] = true
	}
	if lostPrimary || s.inTransition(db) {
		for ord := range count {
			if name := resources.InstanceName(db, ord); name != r.CurrentPrimary && s.wasSilent(db, name) {
				brief[name] = true
			}
		}
	}
	return brief
}

// askAll fills insts, one per ordinal, from the pods and their agents'
// answers, all asked at once.
func (s *syncer) askAll(ctx context.Context, db *dbv1.Database, insts []Instance, pods map[string]*corev1.Pod, brief map[string]bool) {
	var wg sync.WaitGroup
	for ord := range insts {
		name := resources.InstanceName(db, ord)
		inst := &insts[ord]
		*inst = Instance{Name: name, Ordinal: ord}
		pod := pods[name]
		if pod == nil {
			continue
		}
		inst.Exists, inst.Terminating, inst.PodReady = true, !pod.DeletionTimestamp.IsZero(), instance.PodReady(pod)
		inst.Revision, inst.Label = pod.Labels[appsv1.ControllerRevisionHashLabelKey], pod.Labels[dbv1.LabelRole]
		inst.RestartHash = pod.Annotations[resources.AnnotationRestartHash]
		switch {
		case resources.PodPredatesAgent(pod) && !inst.Terminating:
			// made before dbkeeper had replication: the only instance,
			// the primary; the rollout moves it onto the agent
			inst.Agent = legacyStatus(pod, inst.PodReady)
		case pod.Status.PodIP != "" && !inst.Terminating:
			wg.Add(1)
			timeout := statusTimeout
			if brief[name] {
				timeout = lostStatusTimeout
			}
			go func() {
				defer wg.Done()
				s.ask(ctx, db, pod, inst, timeout)
			}()
		}
	}
	wg.Wait()
}

// watchLeaseOfSilentPrimary reads the primary Lease (Input.PrimaryLease)
// while the primary's agent does not answer: the Lease is evidence only
// for a primary in place (a switchover or failover that runs has its own
// steps).
func (s *syncer) watchLeaseOfSilentPrimary(ctx context.Context, db *dbv1.Database, insts []Instance) *LeaseView {
	silent := false
	if r := db.Status.Replication; r != nil && r.CurrentPrimary != "" && r.TargetPrimary == r.CurrentPrimary {
		ord, ok := resources.InstanceOrdinal(db, r.CurrentPrimary)
		silent = ok && ord < len(insts) && insts[ord].Exists && insts[ord].Agent == nil
	}
	if !silent {
		s.forgetLease(db)
		return nil
	}
	return s.watchPrimaryLease(ctx, db)
}

// ask asks pod's agent for its status, within timeout, into inst.
func (s *syncer) ask(ctx context.Context, db *dbv1.Database, pod *corev1.Pod, inst *Instance, timeout time.Duration) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := s.agents.Status(cctx, db, pod)
	key := string(db.UID) + "/" + inst.Name
	if err != nil {
		inst.Err = err.Error()
		inst.TimedOut = cctx.Err() == context.DeadlineExceeded
		s.silent.Store(key, true)
		if v, ok := s.answers.Load(key); ok {
			inst.LastAnswer, inst.LastAnswerAt = v.(answer).status, v.(answer).at
		}
		return
	}
	inst.Agent = &st
	s.silent.Delete(key)
	s.answers.Store(key, answer{status: &st, at: s.now()})
}

// wasSilent says the last status call to pod's agent failed.
func (s *syncer) wasSilent(db *dbv1.Database, pod string) bool {
	_, ok := s.silent.Load(string(db.UID) + "/" + pod)
	return ok
}

// inTransition says a switchover or failover started by this manager
// runs, or ended less than fastAftermath ago.
func (s *syncer) inTransition(db *dbv1.Database) bool {
	_, running := s.started.Load(db.UID)
	return running || s.justSettled(db)
}

// justSettled says a switchover or failover ended here less than
// fastAftermath ago.
func (s *syncer) justSettled(db *dbv1.Database) bool {
	settled, ok := s.settled.Load(db.UID)
	return ok && s.now().Sub(settled.(time.Time)) < fastAftermath
}

// fresh is db as the API server has it while a switchover or failover
// runs or has just ended here (the manager's cache may not have this
// controller's last status write yet: a failover was started twice,
// seconds apart, from a Database read 200 ms after the first start), and
// db itself otherwise.
func (s *syncer) fresh(ctx context.Context, db *dbv1.Database) (*dbv1.Database, error) {
	if !s.inTransition(db) {
		return db, nil
	}
	live := &dbv1.Database{}
	if err := s.reader.Get(ctx, client.ObjectKeyFromObject(db), live); err != nil {
		return nil, fmt.Errorf("reading Database %s: %w", db.Name, err)
	}
	if live.UID != db.UID {
		return db, nil
	}
	return live, nil
}

// switchoverWait is when this manager first saw db's running switchover
// in its current step, zero without one.
func (s *syncer) switchoverWait(db *dbv1.Database) time.Time {
	r := db.Status.Replication
	if r == nil || r.TargetPrimary == "" || r.CurrentPrimary == "" || r.TargetPrimary == r.CurrentPrimary || failingOver(r) {
		s.waits.Delete(db.UID)
		return time.Time{}
	}
	step := r.CurrentPrimary + "|" + r.TargetPrimary + "|" + r.SwitchoverLSN
	if v, ok := s.waits.Load(db.UID); ok && v.(waitMark).step == step {
		return v.(waitMark).since
	}
	m := waitMark{step: step, since: s.now()}
	s.waits.Store(db.UID, m)
	return m.since
}

// syncApplied is the synchronous_standby_names db's primary was seen to
// run with; the first poll after it was applied records the primary's
// position then.
func (s *syncer) syncApplied(db *dbv1.Database, insts []Instance) SyncApplied {
	v, ok := s.synchronous.Load(db.UID)
	if !ok {
		return SyncApplied{}
	}
	a := v.(SyncApplied)
	if a.LSN != "" {
		return a
	}
	for _, inst := range insts {
		if inst.Name == a.Primary && inst.healthyPrimary() && inst.Agent.CurrentLSN != "" {
			a.LSN = inst.Agent.CurrentLSN
			s.synchronous.Store(db.UID, a)
		}
	}
	return a
}

// legacyStatus stands for the agent of a pod made before dbkeeper had
// replication (resources.PodPredatesAgent): such a Database ran one instance,
// its primary, which serves while its pod is Ready. The rollout to the
// current template restarts it once, onto the agent, with its data.
func legacyStatus(pod *corev1.Pod, ready bool) *agentapi.Status {
	st := &agentapi.Status{Pod: pod.Name, State: agentapi.StateRunning, Role: agentapi.RolePrimary, Ready: ready,
		Message: "runs without the instance agent (made before dbkeeper had replication); the rollout restarts it onto the agent"}
	if !ready {
		st.State = agentapi.StateStarting
	}
	return st
}
