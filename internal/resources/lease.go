package resources

import (
	"slices"
	"strings"

	coordinationv1ac "k8s.io/client-go/applyconfigurations/coordination/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// The primary Lease (issue 19) and what lets the agents use it: the engine
// pods run as the ServiceAccount InstanceServiceAccountName, whose Role may
// get and update that one Lease and nothing else. All four go with the
// Database (owner reference).

// InstanceServiceAccount is the engine pods' ServiceAccount.
func InstanceServiceAccount(db *dbv1.Database) *corev1ac.ServiceAccountApplyConfiguration {
	return corev1ac.ServiceAccount(InstanceServiceAccountName(db), db.Namespace).
		WithLabels(Labels(db, ComponentDatabase)).
		WithOwnerReferences(OwnerReference(db))
}

// InstanceRoleName names the Role (and RoleBinding) of the engine pods'
// ServiceAccount.
func InstanceRoleName(db *dbv1.Database) string { return InstanceServiceAccountName(db) }

// InstanceRole lets its subject get and update the primary Lease, by name:
// an agent renews, takes over and releases it with resourceVersion-
// conditional updates, never creates or deletes it (the operator creates
// it, LeaseObject).
func InstanceRole(db *dbv1.Database) *rbacv1ac.RoleApplyConfiguration {
	return rbacv1ac.Role(InstanceRoleName(db), db.Namespace).
		WithLabels(Labels(db, ComponentDatabase)).
		WithOwnerReferences(OwnerReference(db)).
		WithRules(rbacv1ac.PolicyRule().
			WithAPIGroups("coordination.k8s.io").
			WithResources("leases").
			WithResourceNames(LeaseName(db)).
			WithVerbs("get", "update"))
}

// InstanceRoleBinding binds InstanceRole to the engine pods'
// ServiceAccount.
func InstanceRoleBinding(db *dbv1.Database) *rbacv1ac.RoleBindingApplyConfiguration {
	return rbacv1ac.RoleBinding(InstanceRoleName(db), db.Namespace).
		WithLabels(Labels(db, ComponentDatabase)).
		WithOwnerReferences(OwnerReference(db)).
		WithRoleRef(rbacv1ac.RoleRef().
			WithAPIGroup("rbac.authorization.k8s.io").
			WithKind("Role").
			WithName(InstanceRoleName(db))).
		WithSubjects(rbacv1ac.Subject().
			WithKind("ServiceAccount").
			WithName(InstanceServiceAccountName(db)).
			WithNamespace(db.Namespace))
}

// LeaseObject is what the operator applies of the primary Lease: its
// metadata only, with the instances that may hold it, members, in the
// annotation agentapi.AnnotationMembers. An apply without spec creates the
// Lease empty (released) when it is missing and never touches the holder,
// renew time or transitions the agents write, so a holder's renewals
// survive every reconcile. An agent takes the Lease from another holder
// only when it is a member, and a primary cut off from the API server
// serves on only while every other member confirms it (the failsafe,
// docs/design/failover.md).
func LeaseObject(db *dbv1.Database, members []string) *coordinationv1ac.LeaseApplyConfiguration {
	return coordinationv1ac.Lease(LeaseName(db), db.Namespace).
		WithLabels(Labels(db, ComponentDatabase)).
		WithAnnotations(map[string]string{agentapi.AnnotationMembers: strings.Join(members, ",")}).
		WithOwnerReferences(OwnerReference(db))
}

// LeaseMembers are the instances that may hold db's primary Lease: the
// pods the StatefulSet runs (<db>-0 … <db>-(Instances-1)) and holder, the
// Lease's holder ("" when none), when it is another.
func LeaseMembers(db *dbv1.Database, holder string) []string {
	n := int(Instances(db))
	members := make([]string, 0, n+1)
	for i := range n {
		members = append(members, InstanceName(db, i))
	}
	if holder != "" && !slices.Contains(members, holder) {
		members = append(members, holder)
	}
	return members
}
