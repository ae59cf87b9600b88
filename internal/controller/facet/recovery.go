package facet

import (
	"cmp"
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
		var err error
		if source, err = sourceDatabase(ctx, r, cmp.Or(rec.Namespace, db.Namespace), rec.Database); err != nil {
			return nil, err
		}
	}
	return resources.RecoveryStore(db, source)
}

// DumpSourceRefused says why db may not restore the dumps of the Database
// spec.bootstrap.fromBackup names (resources.DumpSourceRefused), reading
// it with r: a *resources.RecoveryRefusedError, nil when it may; other
// errors are the API server's.
func DumpSourceRefused(ctx context.Context, r client.Reader, db *dbv1.Database) error {
	source, err := sourceDatabase(ctx, r, db.Namespace, db.Spec.Bootstrap.FromBackup.Database)
	if err != nil {
		return err
	}
	return resources.DumpSourceRefused(db, source)
}

// sourceDatabase reads the Database namespace/name, nil when there is
// none.
func sourceDatabase(ctx context.Context, r client.Reader, namespace, name string) (*dbv1.Database, error) {
	source := &dbv1.Database{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, source); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("getting the restore source %s/%s: %w", namespace, name, err)
	}
	return source, nil
}
