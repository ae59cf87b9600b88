package cluster

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestOnStop: what a suite registers runs when the cluster stops, last
// registered first, once, and its errors are Stop's (the real-node suite's
// object store left its directory behind at every run before).
func TestOnStop(t *testing.T) {
	var order []string
	c := &Cluster{}
	c.OnStop(func() error { order = append(order, "first"); return nil })
	c.OnStop(func() error { order = append(order, "second"); return errors.New("second failed") })
	err := c.Stop()
	assert.ErrorContains(t, err, "second failed")
	assert.Equal(t, []string{"second", "first"}, order)
	assert.NoError(t, c.Stop(), "nothing runs twice")
	assert.Equal(t, []string{"second", "first"}, order)
}
