package statefulset

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// syncLeaseAccess applies, before the StatefulSet whose pods use them, the
// engine pods' ServiceAccount, its Role and RoleBinding on the primary
// Lease, and the Lease's metadata (which creates it released when it is
// missing, and never touches what the agents write in its spec): its
// members are the pods the StatefulSet runs and the live Lease's holder.
func (s *syncer) syncLeaseAccess(ctx context.Context, db *dbv1.Database) error {
	for _, o := range []struct {
		kind    string
		live    client.Object
		name    string
		desired func(live client.Object) runtime.ApplyConfiguration
	}{
		{"ServiceAccount", &corev1.ServiceAccount{}, resources.InstanceServiceAccountName(db), func(client.Object) runtime.ApplyConfiguration {
			return resources.InstanceServiceAccount(db)
		}},
		{"Role", &rbacv1.Role{}, resources.InstanceRoleName(db), func(client.Object) runtime.ApplyConfiguration {
			return resources.InstanceRole(db)
		}},
		{"RoleBinding", &rbacv1.RoleBinding{}, resources.InstanceRoleName(db), func(client.Object) runtime.ApplyConfiguration {
			return resources.InstanceRoleBinding(db)
		}},
		{"Lease", &coordinationv1.Lease{}, resources.LeaseName(db), func(live client.Object) runtime.ApplyConfiguration {
			holder := ""
			if l, ok := live.(*coordinationv1.Lease); ok && l != nil {
				holder = ptr.Deref(l.Spec.HolderIdentity, "")
			}
			return resources.LeaseObject(db, resources.LeaseMembers(db, holder))
		}},
	} {
		live, err := apply.Live(ctx, s.client, client.ObjectKey{Namespace: db.Namespace, Name: o.name}, o.live)
		if err != nil {
			return fmt.Errorf("getting %s %s: %w", o.kind, o.name, err)
		}
		if _, err := s.writer.Apply(ctx, live, o.desired(live)); err != nil {
			return fmt.Errorf("applying %s %s: %w", o.kind, o.name, err)
		}
	}
	return nil
}
