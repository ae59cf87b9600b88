package v1

import (
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// The defaults that the API server fills in (see the +kubebuilder:default
// markers), for readers of a Database that did not come from it, such as a
// Go client's object before it is created.
const (
	DefaultStorageSize       = "10Gi"
	DefaultBackupStorageSize = "20Gi"
	DefaultBackupMaxAge      = 26 * time.Hour
	DefaultFailoverDelay     = 10 * time.Second
	DefaultMaxFailoverLag    = "16Mi"
)

// FailoverEnabled is spec.highAvailability.failover, or its default.
func (s *DatabaseSpec) FailoverEnabled() bool {
	return s.HighAvailability.Failover == nil || *s.HighAvailability.Failover
}

// FailoverDelay is spec.highAvailability.failoverDelay, or its default.
func (s *DatabaseSpec) FailoverDelay() time.Duration {
	if d := s.HighAvailability.FailoverDelay; d != nil {
		return d.Duration
	}
	return DefaultFailoverDelay
}

// MaxFailoverLag is spec.highAvailability.maxFailoverLag in bytes, or its
// default; 0 is no limit.
func (s *DatabaseSpec) MaxFailoverLag() int64 {
	q := sizeOr(s.HighAvailability.MaxFailoverLag, DefaultMaxFailoverLag)
	return q.Value()
}

// ReplicaCount is spec.replicas, or its default (1).
func (s *DatabaseSpec) ReplicaCount() int32 {
	if s.Replicas == nil {
		return 1
	}
	return *s.Replicas
}

// DataSize is spec.storage.size, or its default.
func (s *DatabaseSpec) DataSize() resource.Quantity {
	return sizeOr(s.Storage.Size, DefaultStorageSize)
}

// BackupSize is spec.backup.storage.size, or its default.
func (s *DatabaseSpec) BackupSize() resource.Quantity {
	return sizeOr(s.Backup.Storage.Size, DefaultBackupStorageSize)
}

// BackupMaxAge is spec.backup.maxAge, or its default.
func (s *DatabaseSpec) BackupMaxAge() time.Duration {
	if s.Backup.MaxAge == nil {
		return DefaultBackupMaxAge
	}
	return s.Backup.MaxAge.Duration
}

func sizeOr(q *resource.Quantity, def string) resource.Quantity {
	if q == nil {
		return resource.MustParse(def)
	}
	return *q
}

// DefaultCARotationOverlap is spec.tls.caRotationOverlap's default.
const DefaultCARotationOverlap = 24 * time.Hour

// CARotationOverlap is spec.tls.caRotationOverlap, or its default.
func (s *DatabaseSpec) CARotationOverlap() time.Duration {
	if s.TLS != nil && s.TLS.CARotationOverlap != nil {
		return s.TLS.CARotationOverlap.Duration
	}
	return DefaultCARotationOverlap
}
