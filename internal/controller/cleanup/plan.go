package cleanup

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// preview is status.deletion: what deleting the Database would remove and
// keep under its current policy. The data PVCs are those that exist and
// those the StatefulSet will create for spec.replicas.
func (r *reconciler) preview(ctx context.Context, db *dbv1.Database) (*dbv1ac.DatabaseStatusApplyConfiguration, error) {
	data := &corev1.PersistentVolumeClaimList{}
	if err := r.list(ctx, db, resources.ComponentDatabase, data); err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, pvc := range data.Items {
		if isDataPVC(db, &pvc) {
			names[pvc.Name] = true
		}
	}
	for i := range resources.Instances(db) {
		names[resources.DataPVCName(db, int(i))] = true
	}
	p := planFor(db.Spec.DeletionPolicy)
	d := dbv1ac.DeletionStatus().WithPolicy(db.Spec.DeletionPolicy)
	if db.Spec.DeletionPolicy == dbv1.DeletionPolicyDoNotDelete {
		d.WithBlocked(true)
		p = plan{}
	}
	add := func(del bool, what string) {
		if del {
			d.WithDeletes(what)
		} else {
			d.WithKeeps(what)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(names)) {
		add(p.deleteData, "PersistentVolumeClaim/"+n)
	}
	if resources.UserSecret(db) {
		d.WithKeeps("Secret/" + resources.CredentialsSecretName(db))
	} else {
		add(p.deleteSecret, "Secret/"+resources.GeneratedSecretName(db))
	}
	add(p.deleteSecret, "Secret/"+resources.SuperuserSecretName(db))
	add(p.deleteBackup, "PersistentVolumeClaim/"+resources.BackupName(db))
	return dbv1ac.DatabaseStatus().WithDeletion(d), nil
}

// plan says, for each kind of kept data, whether a policy deletes it.
type plan struct {
	deleteData, deleteSecret, deleteBackup bool
}

func planFor(p dbv1.DeletionPolicy) plan {
	switch p {
	case dbv1.DeletionPolicyRetain:
		return plan{}
	case dbv1.DeletionPolicyWipeOut:
		return plan{deleteData: true, deleteSecret: true, deleteBackup: true}
	}
	return plan{deleteData: true, deleteSecret: true}
}

func (p plan) String() string {
	word := func(del bool) string {
		if del {
			return "delete"
		}
		return "keep"
	}
	return fmt.Sprintf("%s the data PVCs, %s the generated credentials and superuser Secrets, %s the backup PVC",
		word(p.deleteData), word(p.deleteSecret), word(p.deleteBackup))
}
