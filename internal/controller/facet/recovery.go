package facet

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// RecoveryStore resolves spec.bootstrap.recovery of db to the repository
// it restores (resources.RecoveryStore), reading the source Database,
// which may live in a namespace the manager does not watch, with r (the
// API reader). A source that cannot be used is a
// *resources.RecoveryRefusedError; other errors are the API server's.
func RecoveryStore(ctx context.Context, r client.Reader, db *dbv1.Database) (*dbv1.ObjectStoreSpec, error) {
	rec := db.Spec.Bootstrap.Recovery
	var source *dbv1.Database
	if rec.Database != "" {
		ns := rec.Namespace
		if ns == "" {
			ns = db.Namespace
		}
		source = &dbv1.Database{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: rec.Database}, source); err != nil {
			if !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("getting the recovery source %s/%s: %w", ns, rec.Database, err)
			}
			source = nil
		}
	}
	return resources.RecoveryStore(db, source)
}
