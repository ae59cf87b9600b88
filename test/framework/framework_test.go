package framework

import (
	"net"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFreePortNeverTwice: ports come back distinct even when the kernel
// offers one again (an agent and its server once got the same one), and
// each can be bound.
func TestFreePortNeverTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 300 {
		p, err := FreePort()
		require.NoError(t, err)
		require.False(t, seen[p], "port %d returned twice", p)
		seen[p] = true
	}
	p, err := FreePort()
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	require.NoError(t, err)
	require.NoError(t, l.Close())
}

// TestProcessRSS: the test process's own resident set, in bytes.
func TestProcessRSS(t *testing.T) {
	rss, err := ProcessRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if rss < 1<<20 {
		t.Fatalf("a Go test process resides in %d bytes: not KiB read as bytes?", rss)
	}
	if _, err := ProcessRSS(-1); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}
