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
)

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
