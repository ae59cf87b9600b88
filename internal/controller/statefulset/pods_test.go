package statefulset

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// TestPodStatusChanged wakes the controller for a pod's status, not for
// its labels.
func TestPodStatusChanged(t *testing.T) {
	p := podStatusChanged()
	old := enginePod(nil)
	relabelled := old.DeepCopy()
	relabelled.Labels["x"] = "y"
	assert.False(t, p.Update(event.UpdateEvent{ObjectOld: &old, ObjectNew: relabelled}))
	pulling := enginePod(waiting("ImagePullBackOff", ""))
	assert.True(t, p.Update(event.UpdateEvent{ObjectOld: &old, ObjectNew: &pulling}))
	assert.True(t, p.Create(event.CreateEvent{Object: &old}))
	assert.True(t, p.Delete(event.DeleteEvent{Object: &old}))
}
