// Package agentstest is an in-memory stand-in for the agents of Databases'
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
//
// agents.go holds the instances and the controls tests have over them;
// calls.go implements instance.Agents on them.
package agentstest

import (
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
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
	// parameters are the parameters each pod's agent was sent last.
	parameters map[string]map[string]string
	// major is the major of the cluster's data directories, "" when
	// unset; upgrade the in-place major upgrade pods of its revision run
	// (SetMajorUpgrade).
	major   string
	upgrade *majorUpgrade
}

// majorUpgrade is what the agents of pods of revision do when they start
// on a data directory of from: the primary's upgrades to to (or fails
// with failure), a standby's is emptied once the primary runs to.
type majorUpgrade struct {
	from, to, revision, failure string
}

type member struct {
	role        agentapi.Role
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
	lastRewind *agentapi.RewindReport
	// diverged: a standby that received WAL the primary's timeline does
	// not have, so it cannot follow until rewound (RejoinStandby).
	diverged bool
	// confirms names the primary whose failsafe this member confirmed
	// (agentapi.LeaseStatus.ConfirmedFailsafeOf).
	confirms string
	// leaseUnchanged is how long the member reports the lease unchanged
	// (SetLeaseUnchanged).
	leaseUnchanged time.Duration
	// slowPromote: a switchover's promote outlasts its call
	// (SetSlowPromote); slowPromoting: such a promotion goes on until
	// CompletePromotion.
	slowPromote, slowPromoting bool
	// build is the agent's build (agentapi.Status.Agent), nil when it
	// reports none (SetAgentVersion); refuseBinary makes PushBinary
	// answer 409.
	build        *agentapi.BuildInfo
	refuseBinary bool
	// dataVersion is the major of the member's data directory, report
	// its last major upgrade (SetMajorUpgrade).
	dataVersion string
	report      *agentapi.MajorUpgradeReport
}

// renews says the member, as the lease's holder, keeps renewing it.
func (m *member) renews() bool {
	return m != nil && m.role == agentapi.RolePrimary && !m.stopped && !m.fenced && !m.unreachable
}

// New returns Agents with no instance yet.
func New() *Agents { return &Agents{clusters: map[types.UID]*cluster{}} }

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
		if m.role == agentapi.RolePrimary && !m.stopped && !m.fenced {
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

func (c *cluster) status(pod string) agentapi.Status {
	m := c.instances[pod]
	if m == nil || m.role == "" {
		return agentapi.Status{Pod: pod, State: agentapi.StateWaiting, DataEmpty: true}
	}
	if m.promoting {
		c.takeOver(pod, m)
	}
	s := agentapi.Status{Pod: pod, State: agentapi.StateRunning, Role: m.role, SystemID: c.systemID, Timeline: m.timeline, Ready: true,
		VolumeFull: m.volumeFull, LastRewind: m.lastRewind, Agent: m.build, DataVersion: m.dataVersion, MajorUpgrade: m.report,
		Lease: &agentapi.LeaseStatus{Holder: c.holder, Held: c.holder == pod && m.renews(), ConfirmedFailsafeOf: m.confirms,
			UnchangedFor: metav1.Duration{Duration: m.leaseUnchanged}}}
	if m.volumeFull {
		s.VolumeAvailableBytes = 1 << 20
	}
	if m.fenced {
		s.State, s.Ready, s.Message = agentapi.StateFenced, false, "could not renew the primary lease in time: the server was stopped"
		return s
	}
	if m.promoting || m.slowPromoting {
		s.State, s.Ready = agentapi.StatePromoting, false
		s.ReceivedLSN, s.ReplayedLSN = LSN(m.replayed), LSN(m.replayed)
		return s
	}
	if m.stopped {
		s.State, s.Ready, s.Message = agentapi.StateFailed, false, "the server is stopped"
		return s
	}
	if m.role == agentapi.RolePrimary {
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

// takeOver completes the failover promote of pod once the lease's holder
// no longer renews: pod takes the lease, a primary still running is
// fenced, and pod becomes the primary of a new timeline from what it had
// received.
func (c *cluster) takeOver(pod string, m *member) {
	if c.holder != "" && c.holder != pod && c.instances[c.holder].renews() {
		return
	}
	for n, o := range c.instances {
		if n != pod && o.role == agentapi.RolePrimary && !o.stopped {
			o.fenced = true
		}
	}
	c.holder = pod
	c.timeline++
	c.wal = m.replayed + 0x60
	m.promoting, m.role, m.timeline, m.paused = false, agentapi.RolePrimary, c.timeline, false
}

// SetMajorUpgrade makes every instance's data directory of major from, and
// the agents of pods of the StatefulSet's revision upgrade it in place
// to major to as dbkeeper's do (docs/design/major-upgrades.md): the
// primary's at its first status on such a pod (a new system identifier;
// failure, when set, fails it instead and it serves from), a standby's is
// emptied to be cloned again once the primary runs to.
func (a *Agents) SetMajorUpgrade(db *dbv1.Database, from, to, revision, failure string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.cluster(db)
	c.major, c.upgrade = from, &majorUpgrade{from: from, to: to, revision: revision, failure: failure}
	for _, m := range c.instances {
		m.dataVersion = from
	}
}

// DataVersions is each instance's data directory's major.
func (a *Agents) DataVersions(db *dbv1.Database) map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]string{}
	for n, m := range a.cluster(db).instances {
		out[n] = m.dataVersion
	}
	return out
}

// started plays what the agent of pod does at its start on a pod of the
// upgrade's revision (SetMajorUpgrade).
func (c *cluster) started(pod *corev1.Pod) {
	u, m := c.upgrade, c.instances[pod.Name]
	if u == nil || m == nil || m.role == "" || m.dataVersion != u.from || pod.Labels[appsv1.ControllerRevisionHashLabelKey] != u.revision {
		return
	}
	if m.role == agentapi.RolePrimary {
		if u.failure != "" {
			m.report = &agentapi.MajorUpgradeReport{From: u.from, To: u.to, Phase: agentapi.UpgradeFailed, Message: u.failure}
			return
		}
		m.dataVersion, c.major = u.to, u.to
		c.systemID += "-" + u.to
		m.report = &agentapi.MajorUpgradeReport{From: u.from, To: u.to, Phase: agentapi.UpgradeSucceeded, Method: "link"}
		return
	}
	if _, p := c.primary(); p != nil && p.dataVersion == u.to {
		delete(c.instances, pod.Name) // emptied, to be cloned again
	}
}

// SetAgentVersion makes the agent of pod report build version at the
// current API level ("" reports no build, as agents before the in-place
// takeover); refuse makes a binary pushed to it refused (409).
func (a *Agents) SetAgentVersion(db *dbv1.Database, pod, version string, refuse bool) {
	a.with(db, pod, func(m *member) {
		m.build, m.refuseBinary = nil, refuse
		if version != "" {
			m.build = &agentapi.BuildInfo{Version: version, Level: agentapi.Level}
		}
	})
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
func (a *Agents) Roles(db *dbv1.Database) map[string]agentapi.Role {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]agentapi.Role{}
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
	m.role, m.stopped, m.fenced, m.paused = agentapi.RoleReplica, false, false, false
	m.lastRewind = &agentapi.RewindReport{At: metav1.NewTime(at), DivergedLSN: LSN(diverged), DivergedTimeline: c.timeline - 1,
		EndLSN: LSN(m.replayed), DiscardedTransactions: discarded}
}

// Holder is the pod holding db's primary lease, "" when released.
func (a *Agents) Holder(db *dbv1.Database) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cluster(db).holder
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
	m.slowPromoting, m.role, m.timeline = false, agentapi.RolePrimary, c.timeline
}
