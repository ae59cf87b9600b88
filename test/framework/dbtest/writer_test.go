package dbtest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// writerAcked is a stopped writer whose acknowledgements came at t0 plus
// each offset.
func writerAcked(t0 time.Time, stop time.Duration, offsets ...time.Duration) *Writer {
	w := &Writer{stoppedAt: t0.Add(stop)}
	for i, o := range offsets {
		w.acked = append(w.acked, int64(i+1))
		w.ackAt = append(w.ackAt, t0.Add(o))
	}
	return w
}

func TestOutageIsTheLongestGapSince(t *testing.T) {
	t0 := time.Now()
	ms := time.Millisecond
	w := writerAcked(t0, 10*time.Second, 0, 100*ms, 200*ms, 3*time.Second, 3100*ms, 9900*ms)

	from, to := w.Outage(t0.Add(150 * ms))
	assert.Equal(t, t0.Add(3100*ms), from, "the outage starts at the last acknowledgement before it")
	assert.Equal(t, t0.Add(9900*ms), to, "and ends at the first after it")

	from, to = w.Outage(t0.Add(9950 * ms))
	assert.Equal(t, t0.Add(9950*ms), from, "nothing acknowledged since: the outage starts at since")
	assert.True(t, to.IsZero(), "and has not ended")

	first, ok := w.FirstAckAfter(t0.Add(200 * ms))
	assert.True(t, ok)
	assert.Equal(t, t0.Add(3*time.Second), first, "the first acknowledgement strictly after")
	_, ok = w.FirstAckAfter(t0.Add(9900 * ms))
	assert.False(t, ok, "none after the last")
	last, ok := w.LastAck()
	assert.True(t, ok)
	assert.Equal(t, t0.Add(9900*ms), last)
}

func TestOutageStillRunning(t *testing.T) {
	t0 := time.Now().Add(-10 * time.Second)
	w := writerAcked(t0, 0, 0, 100*time.Millisecond)
	w.stoppedAt = time.Time{}
	from, to := w.Outage(t0)
	assert.Equal(t, t0.Add(100*time.Millisecond), from, "a running writer silent since its last acknowledgement")
	assert.True(t, to.IsZero(), "the outage runs until now")
}
