package resources_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/labels"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestClientServiceWaitsForTheRestore: the client Service selects the
// StatefulSet's pods, except while spec.bootstrap's restore has not
// finished; the headless Service, through which the restore reaches the
// server, always selects them.
func TestClientServiceWaitsForTheRestore(t *testing.T) {
	eng, err := engine.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	bootstrapped := func(restoredFrom string) *dbv1.Database {
		return sample("copy", func(db *dbv1.Database) {
			db.Spec.Bootstrap = &dbv1.BootstrapSpec{FromBackup: dbv1.BootstrapFromBackup{Database: "orders", File: "latest"}}
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
			pod := labels.Set(sts.Spec.Template.Labels)
			selects := func(selector map[string]string) bool {
				return len(selector) > 0 && labels.SelectorFromSet(selector).Matches(pod)
			}
			assert.Equal(t, tc.selects, selects(resources.ClientService(tc.db, eng).Spec.Selector), "client Service")
			assert.True(t, selects(resources.HeadlessService(tc.db, eng).Spec.Selector), "headless Service")
		})
	}
}
