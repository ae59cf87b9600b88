package resources

import (
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// OwnerReference is the controller reference every child carries, so that
// garbage collection removes it with the Database unless cleanup keeps it.
func OwnerReference(db *dbv1.Database) *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().
		WithAPIVersion(dbv1.GroupVersion.String()).
		WithKind("Database").
		WithName(db.Name).
		WithUID(db.UID).
		WithController(true).
		WithBlockOwnerDeletion(true)
}
