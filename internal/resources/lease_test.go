package resources_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// The engine pods' agents may get and update their Database's primary
// Lease and nothing else, with the pods' own ServiceAccount.
func TestInstanceMayUseOnlyItsLease(t *testing.T) {
	db := sample("orders", nil)
	role := resources.InstanceRole(db)
	require.Len(t, role.Rules, 1)
	rule := role.Rules[0]
	assert.Equal(t, []string{"coordination.k8s.io"}, rule.APIGroups)
	assert.Equal(t, []string{"leases"}, rule.Resources)
	assert.Equal(t, []string{"orders-primary"}, rule.ResourceNames, "the Role reaches other Leases than the Database's")
	assert.ElementsMatch(t, []string{"get", "update"}, rule.Verbs, "agents renew and take over with updates, never create or delete")

	binding := resources.InstanceRoleBinding(db)
	assert.Equal(t, "Role", *binding.RoleRef.Kind)
	assert.Equal(t, *role.Name, *binding.RoleRef.Name)
	require.Len(t, binding.Subjects, 1)
	assert.Equal(t, "ServiceAccount", *binding.Subjects[0].Kind)
	assert.Equal(t, *resources.InstanceServiceAccount(db).Name, *binding.Subjects[0].Name)
	assert.Equal(t, "shop", *binding.Subjects[0].Namespace)

	lease := resources.LeaseObject(db, resources.LeaseMembers(db, ""))
	assert.Nil(t, lease.Spec, "applying the Lease would overwrite the holder's renewals")
	for name, owners := range map[string]int{
		"ServiceAccount": len(resources.InstanceServiceAccount(db).OwnerReferences),
		"Role":           len(role.OwnerReferences), "RoleBinding": len(binding.OwnerReferences), "Lease": len(lease.OwnerReferences),
	} {
		assert.Equal(t, 1, owners, "%s does not go with the Database", name)
	}
}

// The engine pods run as the ServiceAccount bound to the Lease's Role, with
// its token, and tell the agent which Lease to hold.
func TestEnginePodHoldsTheLease(t *testing.T) {
	eng, err := engine.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	db := sample("orders", nil)
	sts, err := resources.StatefulSet(db, eng, resources.TLSOn, testAgentImage)
	require.NoError(t, err)
	pod := sts.Spec.Template.Spec
	assert.Equal(t, ptr.To("orders-instance"), pod.ServiceAccountName)
	assert.Equal(t, ptr.To(true), pod.AutomountServiceAccountToken)
	env := map[string]string{}
	for _, e := range pod.Containers[0].Env {
		v := ptr.Deref(e.Value, "")
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			v = "field:" + *e.ValueFrom.FieldRef.FieldPath
		}
		env[*e.Name] = v
	}
	assert.Equal(t, "orders-primary", env[agentapi.EnvLeaseName])
	assert.Equal(t, "field:metadata.namespace", env[agentapi.EnvNamespace])

	// A frozen agent makes the pod NotReady within about 5 s, long before
	// the lease could be taken over.
	probe := pod.Containers[0].ReadinessProbe
	worst := *probe.PeriodSeconds**probe.FailureThreshold + *probe.TimeoutSeconds
	assert.LessOrEqual(t, worst, int32(5))
	assert.Less(t, worst, int32(agentapi.LeaseDuration.Seconds()))
}

// The primary Lease names its members, the instances that may hold it:
// the pods the StatefulSet runs and the holder when it is another (a
// scale-down whose primary has yet to move).
func TestLeaseNamesItsMembers(t *testing.T) {
	db := sample("orders", nil)
	lease := resources.LeaseObject(db, resources.LeaseMembers(db, ""))
	assert.Equal(t, map[string]string{agentapi.AnnotationMembers: "orders-0"}, lease.Annotations, "one instance")

	db.Spec.Replicas = ptr.To[int32](3)
	for _, tc := range []struct {
		holder, want string
	}{
		{"", "orders-0,orders-1,orders-2"},
		{"orders-1", "orders-0,orders-1,orders-2"},
		{"orders-4", "orders-0,orders-1,orders-2,orders-4"},
	} {
		assert.Equal(t, tc.want, resources.LeaseObject(db, resources.LeaseMembers(db, tc.holder)).Annotations[agentapi.AnnotationMembers], "holder %q", tc.holder)
	}

	// the primary's pod is kept through a scale-down (Instances)
	db.Spec.Replicas = ptr.To[int32](1)
	db.Status.Replication = &dbv1.ReplicationStatus{CurrentPrimary: "orders-2"}
	assert.Equal(t, []string{"orders-0", "orders-1", "orders-2"}, resources.LeaseMembers(db, "orders-2"))
	db.Spec.Replicas = ptr.To[int32](0)
	db.Status.Replication = nil
	assert.Empty(t, resources.LeaseMembers(db, ""), "no pod, no member")
}
