package tls

import "time"

// untilRenewal is how long after now a certificate due for renewal at
// renewal (pki.RenewalTime, or the time status.tls or a Secret's
// annotation recorded) is looked at again: at its renewal time, but at
// least a second from now, since a RequeueAfter of zero or less would not
// requeue at all.
func untilRenewal(renewal, now time.Time) time.Duration {
	return max(renewal.Sub(now), time.Second)
}
