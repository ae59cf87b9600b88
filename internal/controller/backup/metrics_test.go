package backup

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// listErrorReader fails every List with err.
type listErrorReader struct {
	client.Reader
	err error
}

func (r listErrorReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return r.err
}

// TestCollectorBeforeTheCacheStarts: a scrape that comes before the
// manager's cache has started reports no series instead of failing the
// whole /metrics endpoint; any other read error is still reported.
func TestCollectorBeforeTheCacheStarts(t *testing.T) {
	gather := func(err error) error {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(&statusCollector{reader: listErrorReader{err: err}})
		families, gatherErr := reg.Gather()
		assert.Empty(t, families)
		return gatherErr
	}
	require.NoError(t, gather(&cache.ErrCacheNotStarted{}))
	require.ErrorContains(t, gather(errors.New("etcd is on fire")), "etcd is on fire")
}
