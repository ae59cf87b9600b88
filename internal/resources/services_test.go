package resources_test

import (
	"maps"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestClientServiceWaitsForTheRestore: the client Service selects the
// StatefulSet's pod labelled primary and the read-only Service those
// labelled replica, except while spec.bootstrap's restore has not
// finished; the headless Service, through which the restore reaches the
// server (and standbys their peers), always selects them all.
func TestClientServiceWaitsForTheRestore(t *testing.T) {
	eng, err := engine.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	bootstrapped := func(restoredFrom string) *dbv1.Database {
		return sample("copy", func(db *dbv1.Database) {
			db.Spec.Bootstrap = &dbv1.BootstrapSpec{FromBackup: &dbv1.BootstrapFromBackup{Database: "orders", File: "latest"}}
			if restoredFrom != "" {
				db.Status.Backup = &dbv1.BackupStatus{RestoredFrom: restoredFrom}
			}
		})
	}
	for name, tc := range map[string]struct {
		db      *dbv1.Database
		selects bool
	}{
		"no bootstrap":     {sample("orders", nil), true},
		"restore pending":  {bootstrapped(""), false},
		"restore finished": {bootstrapped("orders/latest"), true},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.selects, resources.RestoreFinished(tc.db))
			sts, err := resources.StatefulSet(tc.db, eng, resources.TLSOff, testAgentImage)
			require.NoError(t, err)
			pod := func(role string) labels.Set {
				l := labels.Set(maps.Clone(sts.Spec.Template.Labels))
				if role != "" {
					l[dbv1.LabelRole] = role
				}
				return l
			}
			selects := func(selector map[string]string, role string) bool {
				return len(selector) > 0 && labels.SelectorFromSet(selector).Matches(pod(role))
			}
			client := resources.ClientService(tc.db, eng).Spec.Selector
			assert.Equal(t, tc.selects, selects(client, dbv1.RolePrimary), "client Service, primary")
			assert.False(t, selects(client, dbv1.RoleReplica), "client Service, standby")
			assert.False(t, selects(client, ""), "client Service, a pod without a role yet")
			ro := resources.ReadOnlyService(tc.db, eng).Spec.Selector
			assert.Equal(t, tc.selects, selects(ro, dbv1.RoleReplica), "read-only Service, standby")
			assert.False(t, selects(ro, dbv1.RolePrimary), "read-only Service, primary")
			assert.False(t, selects(ro, ""), "read-only Service, a pod without a role yet")
			for _, role := range []string{dbv1.RolePrimary, dbv1.RoleReplica, ""} {
				assert.True(t, selects(resources.HeadlessService(tc.db, eng).Spec.Selector, role), "headless Service, %q", role)
			}
		})
	}
}

// TestReadOnlyService: <name>-ro is a ClusterIP Service on the engine's
// port, owned by the Database, whatever spec.service asks of the client
// Service.
func TestReadOnlyService(t *testing.T) {
	eng, err := engine.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	db := samples["custom"]
	svc := resources.ReadOnlyService(db, eng)
	assert.Equal(t, db.Name+"-ro", *svc.Name)
	assert.Equal(t, corev1.ServiceTypeClusterIP, *svc.Spec.Type, "spec.service.type is the client Service's")
	assert.Empty(t, svc.Annotations, "spec.service.annotations are the client Service's")
	assert.Equal(t, resources.ClientService(db, eng).Spec.Ports, svc.Spec.Ports)
	assert.Equal(t, resources.Labels(db, resources.ComponentDatabase), svc.Labels)
	require.Len(t, svc.OwnerReferences, 1)
	assert.Equal(t, db.Name, *svc.OwnerReferences[0].Name)
	assert.Equal(t, "orders-ro.shop.svc", resources.ReadOnlyServiceHost(samples["default"]))
}
