package service

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestSync: a sync creates the read-write, read-only and headless
// Services and reports the endpoint; the read-write one selects the
// primary, the read-only one the standbys; while spec.bootstrap's restore
// has not finished, the condition says both wait for it.
func TestSync(t *testing.T) {
	for name, tc := range map[string]struct {
		bootstrap, restored bool
		reason              string
	}{
		"no bootstrap":     {reason: dbv1.ReasonServicesReady},
		"restore running":  {bootstrap: true, reason: dbv1.ReasonWaitingForRestore},
		"restore finished": {bootstrap: true, restored: true, reason: dbv1.ReasonServicesReady},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			db := facettest.Database()
			if tc.bootstrap {
				db.Spec.Bootstrap = &dbv1.BootstrapSpec{FromBackup: &dbv1.BootstrapFromBackup{Database: "src"}}
			}
			if tc.restored {
				db.Status.Backup = &dbv1.BackupStatus{RestoredFrom: "src/latest"}
			}
			c := facettest.Client(t, db)
			out, err := newSyncer(c, facet.WriterFor(c, &events.FakeRecorder{}, Name)).Sync(ctx, db)
			require.NoError(t, err)
			assert.Equal(t, metav1.ConditionTrue, out.Condition.Status)
			assert.Equal(t, tc.reason, out.Condition.Reason, out.Condition.Message)
			require.NotNil(t, out.Status.Endpoint)
			assert.Contains(t, *out.Status.Endpoint, resources.ClientServiceName(db))
			assert.Contains(t, out.Condition.Message, resources.ReadOnlyServiceName(db))
			for name, role := range map[string]string{
				resources.ClientServiceName(db):   dbv1.RolePrimary,
				resources.ReadOnlyServiceName(db): dbv1.RoleReplica,
				resources.HeadlessServiceName(db): "",
			} {
				svc := &corev1.Service{}
				require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, svc), "Service %s", name)
				assert.NotEmpty(t, svc.Spec.Ports, "Service %s", name)
				assert.Equal(t, role, svc.Spec.Selector[dbv1.LabelRole], "Service %s", name)
				assert.True(t, metav1.IsControlledBy(svc, db), "Service %s", name)
			}
		})
	}
}

// TestSyncRestoresPorts: a port number somebody else changed is replaced
// by dbkeeper's, and an Event on the Database says so; a sync with nothing
// to repair records none.
func TestSyncRestoresPorts(t *testing.T) {
	ctx := context.Background()
	db := facettest.Database()
	c := facettest.Client(t, db)
	rec := events.NewFakeRecorder(10)
	s := newSyncer(c, facet.WriterFor(c, rec, Name))
	_, err := s.Sync(ctx, db)
	require.NoError(t, err)
	assert.Empty(t, rec.Events, "an Event without a repair")

	svc := &corev1.Service{}
	key := client.ObjectKey{Namespace: db.Namespace, Name: resources.ClientServiceName(db)}
	require.NoError(t, c.Get(ctx, key, svc))
	want := svc.Spec.Ports[0].Port
	svc.Spec.Ports[0].Port = 6543
	require.NoError(t, c.Update(ctx, svc))

	_, err = s.Sync(ctx, db)
	require.NoError(t, err)
	require.NoError(t, c.Get(ctx, key, svc))
	require.Len(t, svc.Spec.Ports, 1)
	assert.Equal(t, want, svc.Spec.Ports[0].Port, "the port was not restored")
	require.Len(t, rec.Events, 1)
	assert.Equal(t, "Normal "+ReasonServicePortsRestored+" Restored the ports of Service "+key.Name+" changed by somebody else", <-rec.Events)

	_, err = s.Sync(ctx, db)
	require.NoError(t, err)
	assert.Empty(t, rec.Events, "an Event without a repair")
}
