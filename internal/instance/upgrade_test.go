package instance_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestReadAgentBinary: the binary's size and SHA-256; the manager's own
// executable reads too.
func TestReadAgentBinary(t *testing.T) {
	path := filepath.Join(t.TempDir(), "manager")
	body := []byte("an agent binary")
	require.NoError(t, os.WriteFile(path, body, 0o755))
	b, err := instance.ReadAgentBinary(path, "v2")
	require.NoError(t, err)
	sum := sha256.Sum256(body)
	assert.Equal(t, instance.AgentBinary{Path: path, Version: "v2", SHA256: hex.EncodeToString(sum[:]), Size: int64(len(body))}, b)
	_, err = instance.ReadAgentBinary(filepath.Join(t.TempDir(), "none"), "v2")
	assert.Error(t, err)
	self, err := instance.SelfBinary()
	require.NoError(t, err)
	assert.Positive(t, self.Size)
	assert.Equal(t, agentapi.Version(), self.Version)
}

// TestAgentVerdictOf: an agent of another build of the same or an older
// level is upgraded; the manager's own build is current; a newer level is
// left alone; an agent that reports no build predates the takeover. Two
// builds of one version are told apart by their executables' sums, and
// an agent that has not read its own yet goes by version.
func TestAgentVerdictOf(t *testing.T) {
	manager := instance.AgentBinary{Version: "v2", SHA256: "bbbb"}
	for _, tc := range []struct {
		agent *agentapi.BuildInfo
		want  instance.AgentVerdict
	}{
		{nil, instance.AgentPredatesTakeover},
		{&agentapi.BuildInfo{Version: "v2", Level: agentapi.Level, SHA256: "bbbb"}, instance.AgentCurrent},
		{&agentapi.BuildInfo{Version: "v2", Level: agentapi.Level}, instance.AgentCurrent},
		{&agentapi.BuildInfo{Version: "v2", Level: agentapi.Level, SHA256: "aaaa"}, instance.AgentUpgrade},
		{&agentapi.BuildInfo{Version: "v1", Level: agentapi.Level}, instance.AgentUpgrade},
		{&agentapi.BuildInfo{Version: "v1", Level: agentapi.Level - 1}, instance.AgentUpgrade},
		{&agentapi.BuildInfo{Version: "v3", Level: agentapi.Level + 1}, instance.AgentNewer},
	} {
		assert.Equal(t, tc.want, instance.AgentVerdictOf(agentapi.Status{Agent: tc.agent}, manager), "%+v", tc.agent)
	}
	assert.Equal(t, instance.AgentUpgrade, instance.AgentVerdictOf(agentapi.Status{Agent: &agentapi.BuildInfo{Version: "(devel)", SHA256: "aaaa"}},
		instance.AgentBinary{Version: "(devel)", SHA256: "bbbb"}), "two builds without VCS information")
	assert.Equal(t, "(devel) (0123456789ab)", instance.AgentBinary{Version: "(devel)", SHA256: "0123456789abcdef"}.Name())
}

// TestPushBinaryNeedsTheToken: no binary leaves without the agents'
// token, nor without the binary.
func TestPushBinaryNeedsTheToken(t *testing.T) {
	db := facettest.Database()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: "orders-0"}, Status: corev1.PodStatus{PodIP: "127.0.0.1"}}
	c := facettest.Client(t, db)
	path := filepath.Join(t.TempDir(), "manager")
	require.NoError(t, os.WriteFile(path, []byte("x"), 0o755))
	b, err := instance.ReadAgentBinary(path, "v2")
	require.NoError(t, err)
	_, err = instance.PodAgents{Secrets: c}.PushBinary(context.Background(), db, pod, b)
	require.Error(t, err)
	assert.Contains(t, err.Error(), resources.ReplicationSecretName(db))
	b.Path = filepath.Join(t.TempDir(), "none")
	_, err = instance.PodAgents{Secrets: c}.PushBinary(context.Background(), db, pod, b)
	assert.ErrorContains(t, err, "sending the agent binary to orders-0")
}
