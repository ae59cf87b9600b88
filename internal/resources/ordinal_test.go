package resources_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestInstanceOrdinal: the one parser of an engine pod's ordinal (the
// replication controller had a second one with other edge rules; "+1"
// passed this one before).
func TestInstanceOrdinal(t *testing.T) {
	db := sample("orders", nil)
	for pod, want := range map[string]int{
		"orders-0": 0, "orders-12": 12, "orders-2147483646": 2147483646,
		"orders-01": -1, "orders-+1": -1, "orders--1": -1, "orders-": -1, "orders-1a": -1,
		"orders-2147483647": -1, "other-0": -1, "orders": -1, "orders-ro-0": -1,
	} {
		n, ok := resources.InstanceOrdinal(db, pod)
		if want < 0 {
			assert.False(t, ok, "%s is not an instance", pod)
			continue
		}
		if assert.True(t, ok, pod) {
			assert.Equal(t, want, n, pod)
		}
	}
}
