package replication

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/instance/agentstest"
)

// hookedAgents are the fake agents with what a test needs beyond them: an
// agent that answers its status slowly (a loaded or frozen pod), an
// answer edited before the controller sees it (a standby that restarted,
// one still receiving WAL until it is detached), and the order of the
// detach calls.
type hookedAgents struct {
	*agentstest.Agents
	mu sync.Mutex
	// delay is how long a pod's status call takes; the caller's deadline
	// ends it earlier.
	delay map[string]time.Duration
	// edit changes a pod's status answer; detached says whether the pod
	// was detached before.
	edit map[string]func(st *agentapi.Status, detached bool)
	// detached are the pods detached so far.
	detached map[string]bool
	// log lists "status <pod>" answers and "detach <pod>" calls in order.
	log []string
}

func hooked(a *agentstest.Agents) *hookedAgents {
	return &hookedAgents{Agents: a, delay: map[string]time.Duration{}, edit: map[string]func(*agentapi.Status, bool){}, detached: map[string]bool{}}
}

// Status implements instance.Agents.
func (h *hookedAgents) Status(ctx context.Context, db *dbv1.Database, pod *corev1.Pod) (agentapi.Status, error) {
	h.mu.Lock()
	d := h.delay[pod.Name]
	h.mu.Unlock()
	if d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return agentapi.Status{}, fmt.Errorf("GET https://%s:%d%s: %w", pod.Status.PodIP, agentapi.Port, agentapi.StatusPath, ctx.Err())
		}
	}
	st, err := h.Agents.Status(ctx, db, pod)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		if e := h.edit[pod.Name]; e != nil {
			e(&st, h.detached[pod.Name])
		}
		h.log = append(h.log, "status "+pod.Name)
	}
	return st, err
}

// Detach implements instance.Agents.
func (h *hookedAgents) Detach(ctx context.Context, db *dbv1.Database, pod *corev1.Pod) (agentapi.Status, error) {
	st, err := h.Agents.Detach(ctx, db, pod)
	if err == nil {
		h.mu.Lock()
		h.detached[pod.Name] = true
		h.log = append(h.log, "detach "+pod.Name)
		h.mu.Unlock()
	}
	return st, err
}

func (h *hookedAgents) setDelay(pod string, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.delay[pod] = d
}

func (h *hookedAgents) setEdit(pod string, e func(st *agentapi.Status, detached bool)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.edit[pod] = e
}
