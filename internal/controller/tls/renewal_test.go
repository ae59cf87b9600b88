package tls

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestUntilRenewal: untilRenewal, which the disabled-TLS branch of Sync,
// observeServer and ensureReplicationClient share, gives the instants each
// of them computed before with max(renewal.Sub(now), time.Second): the
// renewal time when it is more than a second away, else a second from now.
func TestUntilRenewal(t *testing.T) {
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		renewal  time.Time
		expected time.Time
	}{
		{"days away", now.Add(20 * 24 * time.Hour), now.Add(20 * 24 * time.Hour)},
		{"a minute away", now.Add(time.Minute), now.Add(time.Minute)},
		{"just over a second away", now.Add(time.Second + time.Nanosecond), now.Add(time.Second + time.Nanosecond)},
		{"exactly a second away", now.Add(time.Second), now.Add(time.Second)},
		{"half a second away", now.Add(500 * time.Millisecond), now.Add(time.Second)},
		{"now", now, now.Add(time.Second)},
		{"past", now.Add(-time.Hour), now.Add(time.Second)},
		{"zero time", time.Time{}, now.Add(time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := untilRenewal(tc.renewal, now)
			assert.Equal(t, tc.expected, now.Add(got))
			// the expression each call site had before
			assert.Equal(t, max(tc.renewal.Sub(now), time.Second), got)
		})
	}
}
