package agentstest

import (
	"cmp"
	"context"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

var _ instance.Agents = (*Agents)(nil)

func refused(code int, format string, args ...any) error {
	return &agentapi.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func (a *Agents) reach(db *dbv1.Database, pod *corev1.Pod) (*cluster, error) {
	c := a.cluster(db)
	if m := c.instances[pod.Name]; m != nil && m.unreachable {
		return nil, fmt.Errorf("GET https://%s:%d%s: connection refused", pod.Status.PodIP, agentapi.Port, agentapi.StatusPath)
	}
	return c, nil
}

// Status implements instance.Agents.
func (a *Agents) Status(_ context.Context, db *dbv1.Database, pod *corev1.Pod) (agentapi.Status, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, err := a.reach(db, pod)
	if err != nil {
		return agentapi.Status{}, err
	}
	c.started(pod)
	return c.status(pod.Name), nil
}

// Bootstrap implements instance.Agents.
func (a *Agents) Bootstrap(_ context.Context, db *dbv1.Database, pod *corev1.Pod, req agentapi.BootstrapRequest) (agentapi.Status, error) {
	mode := req.Mode
	a.mu.Lock()
	defer a.mu.Unlock()
	c, err := a.reach(db, pod)
	if err != nil {
		return agentapi.Status{}, err
	}
	if m := c.instances[pod.Name]; m != nil && m.role != "" {
		return agentapi.Status{}, refused(http.StatusConflict, "the data directory of %s is not empty", pod.Name)
	}
	a.calls = append(a.calls, fmt.Sprintf("bootstrap %s %s", pod.Name, mode))
	switch mode {
	case agentapi.BootstrapInitdb, agentapi.BootstrapRestore:
		if c.systemID == "" {
			c.systemID = fmt.Sprintf("74%017d", len(a.clusters))
		}
		c.wal, c.timeline = 0x3000060, 1
		c.instances[pod.Name] = &member{role: agentapi.RolePrimary, timeline: 1, unreachable: c.instances[pod.Name] != nil && c.instances[pod.Name].unreachable, dataVersion: c.major}
		c.holder = pod.Name
	case agentapi.BootstrapClone:
		if _, p := c.primary(); p == nil {
			return agentapi.Status{}, refused(http.StatusServiceUnavailable, "no primary to clone")
		}
		c.wal += 0x1000
		c.instances[pod.Name] = &member{role: agentapi.RoleReplica, timeline: c.timeline, replayed: c.wal, dataVersion: c.major}
	default:
		return agentapi.Status{}, refused(http.StatusBadRequest, "unknown mode %q", mode)
	}
	return c.status(pod.Name), nil
}

// Demote implements instance.Agents.
func (a *Agents) Demote(_ context.Context, db *dbv1.Database, pod *corev1.Pod) (agentapi.DemoteResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, err := a.reach(db, pod)
	if err != nil {
		return agentapi.DemoteResponse{}, err
	}
	m := c.instances[pod.Name]
	if m == nil || m.role != agentapi.RolePrimary {
		return agentapi.DemoteResponse{}, refused(http.StatusConflict, "%s is not a primary", pod.Name)
	}
	a.calls = append(a.calls, "demote "+pod.Name)
	c.wal += 0x28 // the shutdown checkpoint
	shutdown := c.wal
	// A fast shutdown sends every WAL record, the checkpoint's too, to
	// the standbys connected.
	for _, o := range c.instances {
		if o.role == agentapi.RoleReplica && !o.paused && !o.stopped {
			o.replayed = shutdown
		}
	}
	m.role, m.replayed = agentapi.RoleReplica, shutdown
	if c.holder == pod.Name {
		c.holder = "" // released once the server stopped
	}
	return agentapi.DemoteResponse{ShutdownLSN: LSN(shutdown), Status: c.status(pod.Name)}, nil
}

// Promote implements instance.Agents.
func (a *Agents) Promote(_ context.Context, db *dbv1.Database, pod *corev1.Pod, req agentapi.PromoteRequest) (agentapi.Status, error) {
	minReplayedLSN := req.MinReplayedLSN
	a.mu.Lock()
	defer a.mu.Unlock()
	c, err := a.reach(db, pod)
	if err != nil {
		return agentapi.Status{}, err
	}
	m := c.instances[pod.Name]
	if m != nil && m.slowPromoting {
		return agentapi.Status{}, refused(http.StatusConflict, "another bootstrap, demote or promote is running")
	}
	if m == nil || m.role != agentapi.RoleReplica {
		return agentapi.Status{}, refused(http.StatusConflict, "%s is not a standby", pod.Name)
	}
	if minReplayedLSN != "" {
		min, err := agentapi.ParseLSN(minReplayedLSN)
		if err != nil {
			return agentapi.Status{}, refused(http.StatusBadRequest, "%v", err)
		}
		if m.replayed < min {
			return agentapi.Status{}, refused(http.StatusConflict, "%s replayed %s, not %s", pod.Name, LSN(m.replayed), minReplayedLSN)
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
		return agentapi.Status{}, refused(http.StatusConflict, "the primary lease is held by %s", c.holder)
	}
	a.calls = append(a.calls, "promote "+pod.Name)
	c.holder = pod.Name
	if m.slowPromote {
		// the lease taken, pg_promote asked; the caller gave up first
		m.slowPromoting = true
		return agentapi.Status{}, fmt.Errorf("POST https://%s:%d%s: %w", pod.Status.PodIP, agentapi.Port, agentapi.PromotePath, context.DeadlineExceeded)
	}
	c.timeline++
	c.wal += 0x60
	m.role, m.timeline = agentapi.RolePrimary, c.timeline
	return c.status(pod.Name), nil
}

// Detach implements instance.Agents: it records the call.
func (a *Agents) Detach(_ context.Context, db *dbv1.Database, pod *corev1.Pod) (agentapi.Status, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, err := a.reach(db, pod)
	if err != nil {
		return agentapi.Status{}, err
	}
	if m := c.instances[pod.Name]; m == nil || m.role != agentapi.RoleReplica {
		return agentapi.Status{}, refused(http.StatusConflict, "%s is not a standby", pod.Name)
	}
	a.calls = append(a.calls, "detach "+pod.Name)
	return c.status(pod.Name), nil
}

// RejoinStandby implements instance.Agents: a diverged standby follows
// again (as if rewound).
func (a *Agents) RejoinStandby(_ context.Context, db *dbv1.Database, pod *corev1.Pod) (agentapi.Status, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, err := a.reach(db, pod)
	if err != nil {
		return agentapi.Status{}, err
	}
	m := c.instances[pod.Name]
	if m == nil || m.role != agentapi.RoleReplica || !m.diverged {
		return agentapi.Status{}, refused(http.StatusConflict, "%s is not a standby that does not stream", pod.Name)
	}
	a.calls = append(a.calls, "rejoin "+pod.Name)
	m.diverged = false
	return c.status(pod.Name), nil
}

// Backup implements instance.Agents: the base backup of a reachable
// primary finishes at once.
func (a *Agents) Backup(_ context.Context, db *dbv1.Database, pod *corev1.Pod, req agentapi.BackupRequest) (agentapi.BackupRun, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, err := a.reach(db, pod)
	if err != nil {
		return agentapi.BackupRun{}, err
	}
	if name, _ := c.primary(); name != pod.Name {
		return agentapi.BackupRun{}, refused(http.StatusConflict, "this instance is not a running primary")
	}
	a.calls = append(a.calls, fmt.Sprintf("backup %s %s", pod.Name, req.ID))
	now := metav1.Now()
	return agentapi.BackupRun{ID: req.ID, Type: cmp.Or(req.Type, "incr"), Instance: pod.Name, Started: now, Finished: &now}, nil
}

// Parameters implements instance.Agents: the fake server takes every
// parameter and needs no restart for any; Parameters tells what it was
// sent last.
func (a *Agents) Parameters(_ context.Context, db *dbv1.Database, pod *corev1.Pod, req agentapi.ParametersRequest) (agentapi.ParametersResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, err := a.reach(db, pod)
	if err != nil {
		return agentapi.ParametersResponse{}, err
	}
	if c.parameters == nil {
		c.parameters = map[string]map[string]string{}
	}
	c.parameters[pod.Name] = req.Parameters
	return agentapi.ParametersResponse{}, nil
}

// SentParameters are the parameters the agent of pod was sent last (nil
// before any).
func (a *Agents) SentParameters(db *dbv1.Database, pod string) map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cluster(db).parameters[pod]
}

// Restart implements instance.Agents: the fake server restarts at once,
// with the role it has.
func (a *Agents) Restart(_ context.Context, db *dbv1.Database, pod *corev1.Pod) (agentapi.Status, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, err := a.reach(db, pod)
	if err != nil {
		return agentapi.Status{}, err
	}
	return c.status(pod.Name), nil
}

// PushBinary implements instance.Agents: the fake agent takes the build
// at once (its server runs on), or refuses it (SetAgentVersion).
func (a *Agents) PushBinary(_ context.Context, db *dbv1.Database, pod *corev1.Pod, b instance.AgentBinary) (agentapi.TakeoverAnswer, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, err := a.reach(db, pod)
	if err != nil {
		return agentapi.TakeoverAnswer{}, err
	}
	a.calls = append(a.calls, "push-binary "+pod.Name+" "+b.Version)
	m := c.instances[pod.Name]
	if m == nil || m.build == nil {
		return agentapi.TakeoverAnswer{}, &agentapi.Error{Code: http.StatusNotFound, Message: "404 page not found"}
	}
	if m.refuseBinary {
		return agentapi.TakeoverAnswer{}, &agentapi.Error{Code: http.StatusConflict, Message: "the check of the new binary failed"}
	}
	from := m.build.Version
	m.build = &agentapi.BuildInfo{Version: b.Version, Level: agentapi.Level,
		LastTakeover: &agentapi.TakeoverReport{From: from, Adopted: true}}
	return agentapi.TakeoverAnswer{From: from, Version: b.Version}, nil
}
