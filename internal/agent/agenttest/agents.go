// Package agenttest is an in-memory stand-in for the agents of Databases'
// instances, for the tests that run no agent (unit tests, envtest, kwok):
// an instance has no data until it is bootstrapped, becomes the primary on
// initdb and a streaming standby of the primary on clone; demote and
// promote change roles, timelines and positions as a real switchover
// does. Instances are kept per Database (by UID) and pod name, so an
// instance keeps its data when its pod is replaced, as with a volume.
//
// The primary lease is modelled too: initdb and a switchover's promote
// take it, demote releases it. A failover's promote (PromoteRequest's
// Failover) answers at once, as the agent's 202 does, and completes on a
// later status once the holder no longer renews (its server stopped or
// fenced, its agent unreachable); the primary it replaces is then fenced
// if it still ran, until Rejoin makes it a standby (pg_rewind).
package agenttest

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agent"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// Agents is an instance.Agents of in-memory instances.
type Agents struct {
	mu       sync.Mutex
	clusters map[types.UID]*cluster
	// Calls records every bootstrap, demote and promote, as
	// "<verb> <pod>[ <mode>]", in order.
	calls []string
}

type cluster struct {
	systemID string
	wal      uint64
	timeline uint32
	// holder holds the primary lease, "" when released.
	holder    string
	instances map[string]*member
}

type member struct {
	role        agent.Role
	timeline    uint32
	replayed    uint64
	unreachable bool
	stopped     bool
	// paused: the WAL receiver does not run, so replay falls behind.
	paused bool
	// fenced: the agent stopped its primary's server (lease lost).
	fenced bool
	// volumeFull: the data volume has no room.
	volumeFull bool
	// promoting: a failover's promote waits to take the lease over.
	promoting  bool
	lastRewind *agent.RewindReport
	// diverged: a standby that received WAL the primary's timeline does
	// not have, so it cannot follow until rewound (RejoinStandby).
	diverged bool
	// confirms names the primary whose failsafe this member confirmed
	// (agent.LeaseStatus.ConfirmedFailsafeOf).
	confirms string
	// leaseUnchanged is how long the member reports the lease unchanged
	// (SetLeaseUnchanged).
	leaseUnchanged time.Duration
	// slowPromote: a switchover's promote outlasts its call
	// (SetSlowPromote); slowPromoting: such a promotion goes on until
	// CompletePromotion.
	slowPromote, slowPromoting bool
}

// renews says the member, as the lease's holder, keeps renewing it.
func (m *member) renews() bool {
	return m != nil && m.role == agent.RolePrimary && !m.stopped && !m.fenced && !m.unreachable
}

// New returns Agents with no instance yet.
func New() *Agents { return &Agents{clusters: map[types.UID]*cluster{}} }

var _ instance.Agents = (*Agents)(nil)

func (a *Agents) cluster(db *dbv1.Database) *cluster {
	c := a.clusters[db.UID]
	if c == nil {
		c = &cluster{instances: map[string]*member{}}
		a.clusters[db.UID] = c
	}
	return c
}

// primary is the running primary of c, when exactly one runs.
func (c *cluster) primary() (string, *member) {
	var name string
	var found *member
	for n, m := range c.instances {
		if m.role == agent.RolePrimary && !m.stopped && !m.fenced {
			if found != nil {
				return "", nil
			}
			name, found = n, m
		}
	}
	return name, found
}

// LSN formats a position the way PostgreSQL does.
func LSN(pos uint64) string { return fmt.Sprintf("%X/%X", pos>>32, uint32(pos)) }

func (c *cluster) status(pod string) agent.Status {
	m := c.instances[pod]
	if m == nil || m.role == "" {
		return agent.Status{Pod: pod, State: agent.StateWaiting, DataEmpty: true}
	}
	if m.promoting {
		c.takeOver(pod, m)
	}
	s := agent.Status{Pod: pod, State: agent.StateRunning, Role: m.role, SystemID: c.systemID, Timeline: m.timeline, Ready: true,
		VolumeFull: m.volumeFull, LastRewind: m.lastRewind,
		Lease: &agent.LeaseStatus{Holder: c.holder, Held: c.holder == pod && m.renews(), ConfirmedFailsafeOf: m.confirms,
			UnchangedFor: metav1.Duration{Duration: m.leaseUnchanged}}}
	if m.volumeFull {
		s.VolumeAvailableBytes = 1 << 20
	}
	if m.fenced {
		s.State, s.Ready, s.Message = agent.StateFenced, false, "could not renew the primary lease in time: the server was stopped"
		return s
	}
	if m.promoting || m.slowPromoting {
		s.State, s.Ready = agent.StatePromoting, false
		s.ReceivedLSN, s.ReplayedLSN = LSN(m.replayed), LSN(m.replayed)
		return s
	}
	if m.stopped {
		s.State, s.Ready, s.Message = agent.StateFailed, false, "the server is stopped"
		return s
	}
	if m.role == agent.RolePrimary {
		s.CurrentLSN = LSN(c.wal)
		return s
	}
	if m.diverged {
		s.WALReceiver = "waiting"
		s.ReceivedLSN, s.ReplayedLSN = LSN(m.replayed), LSN(m.replayed)
		return s
	}
	if _, p := c.primary(); p != nil && !m.paused {
		// Streaming: a standby follows the primary onto its timeline.
		m.replayed, m.timeline = c.wal, p.timeline
		s.Timeline, s.WALReceiver = m.timeline, "streaming"
	}
	s.ReceivedLSN, s.ReplayedLSN = LSN(m.replayed), LSN(m.replayed)
	return s
}

func refused(code int, format string, args ...any) error {
	return &agent.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func (a *Agents) reach(db *dbv1.Database, pod *corev1.Pod) (*cluster, error) {
	c := a.cluster(db)
	if m := c.instances[pod.Name]; m != nil && m.unreachable {
		return nil, fmt.Errorf("GET https://%s:%d%s: connection refused", pod.Status.PodIP, agent.Port, agent.StatusPath)
	}
	return c, nil
}

// Status implements instance.Agents.
func (a *Agents) Status(_ context.Context, db *dbv1.Database, pod *corev1.Pod) (agent.Status, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, err := a.reach(db, pod)
	if err != nil {
		return agent.Status{}, err
	}
	return c.status(pod.Name), nil
}

// Bootstrap implements instance.Agents.
func (a *Agents) Bootstrap(_ context.Context, db *dbv1.Database, pod *corev1.Pod, req agent.BootstrapRequest) (agent.Status, error) {
	mode := req.Mode
	a.mu.Lock()
	defer a.mu.Unlock()
	c, err := a.reach(db, pod)
	if err != nil {
		return agent.Status{}, err
	}
	if m := c.instances[pod.Name]; m != nil && m.role != "" {
		return agent.Status{}, refused(http.StatusConflict, "the data directory of %s is not empty", pod.Name)
	}
	a.calls = append(a.calls, fmt.Sprintf("bootstrap %s %s", pod.Name, mode))
	switch mode {
	case agent.BootstrapInitdb, agent.BootstrapRestore:
		if c.systemID == "" {
			c.systemID = fmt.Sprintf("74%017d", len(a.clusters))
		}
		c.wal, c.timeline = 0x3000060, 1
		c.instances[pod.Name] = &member{role: agent.RolePrimary, timeline: 1, unreachable: c.instances[pod.Name] != nil && c.instances[pod.Name].unreachable}
		c.holder = pod.Name
	case agent.BootstrapClone:
		if _, p := c.primary(); p == nil {
			return agent.Status{}, refused(http.StatusServiceUnavailable, "no primary to clone")
		}
		c.wal += 0x1000
		c.instances[pod.Name] = &member{role: agent.RoleReplica, timeline: c.timeline, replayed: c.wal}
	default:
		return agent.Status{}, refused(http.StatusBadRequest, "unknown mode %q", mode)
	}
	return c.status(pod.Name), nil
}

// Demote implements instance.Agents.
func (a *Agents) Demote(_ context.Context, db *dbv1.Database, pod *corev1.Pod) (agent.DemoteResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, err := a.reach(db, pod)
	if err != nil {
		return agent.DemoteResponse{}, err
	}
	m := c.instances[pod.Name]
	if m == nil || m.role != agent.RolePrimary {
		return agent.DemoteResponse{}, refused(http.StatusConflict, "%s is not a primary", pod.Name)
	}
	a.calls = append(a.calls, "demote "+pod.Name)
	c.wal += 0x28 // the shutdown checkpoint
	shutdown := c.wal
	// A fast shutdown sends every WAL record, the checkpoint's too, to
	// the standbys connected.
	for _, o := range c.instances {
		if o.role == agent.RoleReplica && !o.paused && !o.stopped {
			o.replayed = shutdown
		}
	}
	m.role, m.replayed = agent.RoleReplica, shutdown
	if c.holder == pod.Name {
		c.holder = "" // released once the server stopped
	}
	return agent.DemoteResponse{ShutdownLSN: LSN(shutdown), Status: c.status(pod.Name)}, nil
}

// takeOver completes the failover promote of pod once the lease's holder
// no longer renews: pod takes the lease, a primary still running is
// fenced, and pod becomes the primary of a new timeline from what it had
// received.
func (c *cluster) takeOver(pod string, m *member) {
	if c.holder != "" && c.holder != pod && c.instances[c.holder].renews() {
		return
	}
	for n, o := range c.instances {
		if n != pod && o.role == agent.RolePrimary && !o.stopped {
			o.fenced = true
		}
	}
	c.holder = pod
	c.timeline++
	c.wal = m.replayed + 0x60
	m.promoting, m.role, m.timeline, m.paused = false, agent.RolePrimary, c.timeline, false
}

// Promote implements instance.Agents.
func (a *Agents) Promote(_ context.Context, db *dbv1.Database, pod *corev1.Pod, req agent.PromoteRequest) (agent.Status, error) {
	minReplayedLSN := req.MinReplayedLSN
	a.mu.Lock()
	defer a.mu.Unlock()
	c, err := a.reach(db, pod)
	if err != nil {
		return agent.Status{}, err
	}
	m := c.instances[pod.Name]
	if m != nil && m.slowPromoting {
		return agent.Status{}, refused(http.StatusConflict, "another bootstrap, demote or promote is running")
	}
	if m == nil || m.role != agent.RoleReplica {
		return agent.Status{}, refused(http.StatusConflict, "%s is not a standby", pod.Name)
	}
	if minReplayedLSN != "" {
		min, err := agent.ParseLSN(minReplayedLSN)
		if err != nil {
			return agent.Status{}, refused(http.StatusBadRequest, "%v", err)
		}
		if m.replayed < min {
			return agent.Status{}, refused(http.StatusConflict, "%s replayed %s, not %s", pod.Name, LSN(m.replayed), minReplayedLSN)
		}
	}
	if req.Failover {
		if !m.promoting {
			a.calls = append(a.calls, "promote "+pod.Name+" failover")
		}
		m.promoting = true
		return c.status(pod.Name), nil
	}
	if c.holder != "" && c.holder != pod.Name && c.instances[c.holder].renews() {
		return agent.Status{}, refused(http.StatusConflict, "the primary lease is held by %s", c.holder)
	}
	a.calls = append(a.calls, "promote "+pod.Name)
	c.holder = pod.Name
	if m.slowPromote {
		// the lease taken, pg_promote asked; the caller gave up first
		m.slowPromoting = true
		return agent.Status{}, fmt.Errorf("POST https://%s:%d%s: %w", pod.Status.PodIP, agent.Port, agent.PromotePath, context.DeadlineExceeded)
	}
	c.timeline++
	c.wal += 0x60
	m.role, m.timeline = agent.RolePrimary, c.timeline
	return c.status(pod.Name), nil
}

// Detach implements instance.Agents: it records the call.
func (a *Agents) Detach(_ context.Context, db *dbv1.Database, pod *corev1.Pod) (agent.Status, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, err := a.reach(db, pod)
	if err != nil {
		return agent.Status{}, err
	}
	if m := c.instances[pod.Name]; m == nil || m.role != agent.RoleReplica {
		return agent.Status{}, refused(http.StatusConflict, "%s is not a standby", pod.Name)
	}
	a.calls = append(a.calls, "detach "+pod.Name)
	return c.status(pod.Name), nil
}

// RejoinStandby implements instance.Agents: a diverged standby follows
// again (as if rewound).
func (a *Agents) RejoinStandby(_ context.Context, db *dbv1.Database, pod *corev1.Pod) (agent.Status, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, err := a.reach(db, pod)
	if err != nil {
		return agent.Status{}, err
	}
	m := c.instances[pod.Name]
	if m == nil || m.role != agent.RoleReplica || !m.diverged {
		return agent.Status{}, refused(http.StatusConflict, "%s is not a standby that does not stream", pod.Name)
	}
	a.calls = append(a.calls, "rejoin "+pod.Name)
	m.diverged = false
	return c.status(pod.Name), nil
}

// SetDiverged makes the standby pod unable to follow the primary's
// timeline until RejoinStandby.
func (a *Agents) SetDiverged(db *dbv1.Database, pod string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if m := a.cluster(db).instances[pod]; m != nil && m.timeline > 1 {
		// it stayed on the timeline before the primary's
		m.diverged, m.timeline = true, m.timeline-1
	}
}

// Calls returns the bootstrap, demote and promote calls so far.
func (a *Agents) Calls() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.calls...)
}

// SetUnreachable makes the agent of pod answer nothing (or again).
func (a *Agents) SetUnreachable(db *dbv1.Database, pod string, unreachable bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.cluster(db)
	m := c.instances[pod]
	if m == nil {
		m = &member{}
		c.instances[pod] = m
	}
	m.unreachable = unreachable
}

// SetPaused stops (or restarts) the WAL receiver of the standby pod: it
// reports no streaming and its replay falls behind the primary.
func (a *Agents) SetPaused(db *dbv1.Database, pod string, paused bool) {
	a.with(db, pod, func(m *member) { m.paused = paused })
}

// SetStopped makes the server of pod stop (not streaming, not ready) or
// run again.
func (a *Agents) SetStopped(db *dbv1.Database, pod string, stopped bool) {
	a.with(db, pod, func(m *member) { m.stopped = stopped })
}

// with runs f on the instance pod of db, when it exists.
func (a *Agents) with(db *dbv1.Database, pod string, f func(*member)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if m := a.cluster(db).instances[pod]; m != nil {
		f(m)
	}
}

// Write advances the primary's WAL position by n bytes, as writes do;
// standbys catch up on their next status.
func (a *Agents) Write(db *dbv1.Database, n uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cluster(db).wal += n
}

// Roles maps each instance of db with data to its role.
func (a *Agents) Roles(db *dbv1.Database) map[string]agent.Role {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]agent.Role{}
	for n, m := range a.cluster(db).instances {
		if m.role != "" {
			out[n] = m.role
		}
	}
	return out
}

// SetFenced makes the agent of the primary pod report that it fenced
// itself (its server stopped: it lost the lease), or not.
func (a *Agents) SetFenced(db *dbv1.Database, pod string, fenced bool) {
	a.with(db, pod, func(m *member) { m.fenced = fenced })
}

// SetLeaseUnchanged makes pod's agent report the lease unchanged for d
// on its clock.
func (a *Agents) SetLeaseUnchanged(db *dbv1.Database, pod string, d time.Duration) {
	a.with(db, pod, func(m *member) { m.leaseUnchanged = d })
}

// SetConfirmsFailsafe makes the agent of the standby pod report that it
// confirmed the failsafe of primary (a primary serving without the API
// server, internal/agent), "" for none.
func (a *Agents) SetConfirmsFailsafe(db *dbv1.Database, pod, primary string) {
	a.with(db, pod, func(m *member) { m.confirms = primary })
}

// SetVolumeFull makes the agent of pod report a full data volume, or not.
func (a *Agents) SetVolumeFull(db *dbv1.Database, pod string, full bool) {
	a.with(db, pod, func(m *member) { m.volumeFull = full })
}

// Rejoin makes the former primary pod a standby of the current primary,
// as its agent does with pg_rewind, reporting discarded transactions of
// its own timeline that the new primary never had.
func (a *Agents) Rejoin(db *dbv1.Database, pod string, at time.Time, discarded int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.cluster(db)
	m := c.instances[pod]
	if m == nil {
		return
	}
	diverged := c.wal
	m.role, m.stopped, m.fenced, m.paused = agent.RoleReplica, false, false, false
	m.lastRewind = &agent.RewindReport{At: metav1.NewTime(at), DivergedLSN: LSN(diverged), DivergedTimeline: c.timeline - 1,
		EndLSN: LSN(m.replayed), DiscardedTransactions: discarded}
}

// Holder is the pod holding db's primary lease, "" when released.
func (a *Agents) Holder(db *dbv1.Database) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cluster(db).holder
}

// Backup implements instance.Agents: the base backup of a reachable
// primary finishes at once.
func (a *Agents) Backup(_ context.Context, db *dbv1.Database, pod *corev1.Pod, req agent.BackupRequest) (agent.BackupRun, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, err := a.reach(db, pod)
	if err != nil {
		return agent.BackupRun{}, err
	}
	if name, _ := c.primary(); name != pod.Name {
		return agent.BackupRun{}, refused(http.StatusConflict, "this instance is not a running primary")
	}
	a.calls = append(a.calls, fmt.Sprintf("backup %s %s", pod.Name, req.ID))
	now := metav1.Now()
	return agent.BackupRun{ID: req.ID, Type: cmp.Or(req.Type, "incr"), Instance: pod.Name, Started: now, Finished: &now}, nil
}

// SetSlowPromote makes a switchover's promote of the standby pod outlast
// its call, as a pg_promote slower than the operator's HTTP call whose
// agent follows it to its end: Promote takes the lease and fails with the
// caller's deadline, and from then on the agent reports Promoting and
// answers another Promote 409 (busy) until CompletePromotion.
func (a *Agents) SetSlowPromote(db *dbv1.Database, pod string, slow bool) {
	a.with(db, pod, func(m *member) { m.slowPromote = slow })
}

// CompletePromotion ends the promotion of pod that outlasted its call
// (SetSlowPromote): it runs as the primary of a new timeline.
func (a *Agents) CompletePromotion(db *dbv1.Database, pod string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.cluster(db)
	m := c.instances[pod]
	if m == nil || !m.slowPromoting {
		return
	}
	c.timeline++
	c.wal += 0x60
	m.slowPromoting, m.role, m.timeline = false, agent.RolePrimary, c.timeline
}
