package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
)

// AnnotationRestartHash on the pods' template, and so on each pod made
// from it, is a hash of what only a restart of the pod changes
// (RestartHash): a pod whose annotation is the template's runs what the
// template says but for the agent binary, which the agent replaces in
// place (docs/design/upgrades.md, part 1).
const AnnotationRestartHash = "database.dbkeeper.io/restart-hash"

// RestartHash is the hash of a pod template's spec with the init
// containers' images left out (the init container only copies the agent
// binary into the pod, and the running agent replaces itself with a new
// one without a restart), and of restartRevision (AnnotationRestartRevision:
// the parameters that PostgreSQL applies only at a start).
func RestartHash(spec *corev1ac.PodSpecApplyConfiguration, restartRevision string) (string, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return "", fmt.Errorf("hashing the pod template: %w", err)
	}
	var s corev1.PodSpec
	if err := json.Unmarshal(b, &s); err != nil {
		return "", fmt.Errorf("hashing the pod template: %w", err)
	}
	for i := range s.InitContainers {
		s.InitContainers[i].Image = ""
	}
	if b, err = json.Marshal(struct {
		Spec            corev1.PodSpec `json:"spec"`
		RestartRevision string         `json:"restartRevision,omitempty"`
	}{s, restartRevision}); err != nil {
		return "", fmt.Errorf("hashing the pod template: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8]), nil
}
