package facet

import (
	"context"
	"fmt"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// ResolveVolumeRepository sets db's spec.backup.volumeRepository, in
// memory only, to the value in effect (resources.VolumeRepositoryFor, from
// the dump CronJob in c's cache), so that every controller building from
// it agrees. With the backup controller disabled (backup false) nothing
// would serve the repository, and unset means Disabled.
func ResolveVolumeRepository(ctx context.Context, c client.Reader, db *dbv1.Database, backup bool) error {
	if db.Spec.Backup.VolumeRepository != "" {
		return nil
	}
	if !backup {
		db.Spec.Backup.VolumeRepository = dbv1.VolumeRepositoryDisabled
		return nil
	}
	key := client.ObjectKey{Namespace: db.Namespace, Name: resources.BackupName(db)}
	cron, err := apply.Live(ctx, c, key, &batchv1.CronJob{})
	if err != nil {
		return fmt.Errorf("getting CronJob %s to learn whether the Database keeps a repository on its backup volume: %w", key.Name, err)
	}
	db.Spec.Backup.VolumeRepository = resources.VolumeRepositoryFor(db, cron)
	return nil
}

// backupEnabled says whether the backup controller runs among o's facets
// (all do when o lists none, as in a controller's own tests).
func backupEnabled(o Options) bool {
	return len(o.Facets) == 0 || slices.Contains(o.Facets, dbv1.ConditionBackupReady)
}
