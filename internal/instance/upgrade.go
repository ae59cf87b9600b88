package instance

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// agentBinaryTimeout bounds the sending of a binary to an agent (tens of
// MB) and its check there.
const agentBinaryTimeout = 5 * time.Minute

// AgentBinary is a build of the agent the manager sends to agents of
// another build, which replace themselves with it in place
// (docs/design/upgrades.md): the manager's own executable.
type AgentBinary struct {
	// Path is the executable; Version its build (agentapi.Version).
	Path    string
	Version string
	// SHA256 (hex) and Size are the executable's.
	SHA256 string
	Size   int64
}

// SelfBinary is the running manager's executable as the agent binary of
// its build.
func SelfBinary() (AgentBinary, error) {
	return ReadAgentBinary("/proc/self/exe", agentapi.Version())
}

// ReadAgentBinary reads the executable at path, of build version, for its
// size and SHA-256.
func ReadAgentBinary(path, version string) (AgentBinary, error) {
	sum, size, err := agentapi.FileSHA256(path)
	if err != nil {
		return AgentBinary{}, fmt.Errorf("reading the agent binary: %w", err)
	}
	return AgentBinary{Path: path, Version: version, SHA256: sum, Size: size}, nil
}

// AgentVerdict is what the manager does with an agent of a given build.
type AgentVerdict string

// The verdicts of AgentVerdictOf.
const (
	// AgentCurrent runs the manager's build: nothing to do.
	AgentCurrent AgentVerdict = "Current"
	// AgentUpgrade runs another build of the same or an older API level:
	// it is sent the manager's binary.
	AgentUpgrade AgentVerdict = "Upgrade"
	// AgentNewer speaks a newer API level than the manager (a chart
	// downgraded): it is left alone; no binary is sent backwards.
	AgentNewer AgentVerdict = "Newer"
	// AgentPredatesTakeover reports no build: it was built before the
	// in-place takeover and only a restart of its pod upgrades it.
	AgentPredatesTakeover AgentVerdict = "PredatesTakeover"
)

// AgentVerdictOf is what the manager of build b (at API level
// agentapi.Level) does with the agent that reported s. Builds are told
// apart by their executables' SHA-256 when the agent reports its own, by
// version otherwise (an agent that has not read its executable yet).
func AgentVerdictOf(s agentapi.Status, b AgentBinary) AgentVerdict {
	switch {
	case s.Agent == nil:
		return AgentPredatesTakeover
	case s.Agent.Level > agentapi.Level:
		return AgentNewer
	case s.Agent.SHA256 != "" && b.SHA256 != "":
		if s.Agent.SHA256 == b.SHA256 {
			return AgentCurrent
		}
	case s.Agent.Version == b.Version:
		return AgentCurrent
	}
	return AgentUpgrade
}

// Name names the build in messages (agentapi.BuildName).
func (b AgentBinary) Name() string { return agentapi.BuildName(b.Version, b.SHA256) }

// PushBinary sends b to the agent of pod, which checks it and replaces
// itself with it, its server running on (agentapi.Client.PushBinary). A
// 409 says it did not take it: a bad sum, a failed check (the message
// quotes it) or an operation in flight (try again later).
func (a PodAgents) PushBinary(ctx context.Context, db *dbv1.Database, pod *corev1.Pod, b AgentBinary) (agentapi.TakeoverAnswer, error) {
	f, err := os.Open(b.Path)
	if err != nil {
		return agentapi.TakeoverAnswer{}, fmt.Errorf("sending the agent binary to %s: %w", pod.Name, err)
	}
	defer f.Close()
	return call(ctx, a, db, pod, agentBinaryTimeout, func(c agentapi.Client, ctx context.Context, base string) (agentapi.TakeoverAnswer, error) {
		return c.PushBinary(ctx, base, b.Version, b.SHA256, f, b.Size)
	})
}
