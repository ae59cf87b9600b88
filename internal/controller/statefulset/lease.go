package statefulset

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// syncLeaseAccess applies, before the StatefulSet whose pods use them, the
// engine pods' ServiceAccount, its Role and RoleBinding on the primary
// Lease, and the Lease's metadata (which creates it released when it is
// missing, and never touches what the agents write in its spec).
func (s *syncer) syncLeaseAccess(ctx context.Context, db *dbv1.Database) error {
	for _, o := range []struct {
		kind    string
		live    client.Object
		name    string
		desired runtime.ApplyConfiguration
	}{
		{"ServiceAccount", &corev1.ServiceAccount{}, resources.InstanceServiceAccountName(db), resources.InstanceServiceAccount(db)},
		{"Role", &rbacv1.Role{}, resources.InstanceRoleName(db), resources.InstanceRole(db)},
		{"RoleBinding", &rbacv1.RoleBinding{}, resources.InstanceRoleName(db), resources.InstanceRoleBinding(db)},
		{"Lease", &coordinationv1.Lease{}, resources.LeaseName(db), resources.LeaseObject(db)},
	} {
		live, err := apply.Live(ctx, s.client, client.ObjectKey{Namespace: db.Namespace, Name: o.name}, o.live)
		if err != nil {
			return fmt.Errorf("getting %s %s: %w", o.kind, o.name, err)
		}
		if _, err := s.writer.Apply(ctx, live, o.desired); err != nil {
			return fmt.Errorf("applying %s %s: %w", o.kind, o.name, err)
		}
	}
	return nil
}
