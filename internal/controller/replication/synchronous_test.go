package replication

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
)

func TestSynchronousFor(t *testing.T) {
	db := func(n int32, sync *dbv1.SynchronousSpec) *dbv1.Database {
		d := facettest.Database()
		d.Spec.Replicas = ptr.To(n)
		d.Spec.HighAvailability.Synchronous = sync
		return d
	}
	required := func(m dbv1.SynchronousMethod, k int32) *dbv1.SynchronousSpec {
		return &dbv1.SynchronousSpec{Method: m, Number: k, DataDurability: dbv1.DataDurabilityRequired}
	}
	preferred := func(k int32) *dbv1.SynchronousSpec {
		return &dbv1.SynchronousSpec{Method: dbv1.SynchronousAny, Number: k, DataDurability: dbv1.DataDurabilityPreferred}
	}
	paused := func(i Instance) Instance { i.Agent.WALReceiver = ""; return i }
	three := []Instance{inst(0, primaryAt("orders-0", "0/10"), ""), inst(1, standbyAt("orders-1", "0/10"), ""), inst(2, standbyAt("orders-2", "0/10"), "")}
	for name, tc := range map[string]struct {
		db       *dbv1.Database
		insts    []Instance
		names    string
		degraded bool
	}{
		"asynchronous": {db: db(3, nil), insts: three, names: ""},
		"ANY 1 of every standby": {db: db(3, required(dbv1.SynchronousAny, 1)), insts: three,
			names: `ANY 1 ("orders-1", "orders-2")`},
		"FIRST 2": {db: db(3, required(dbv1.SynchronousFirst, 2)), insts: three,
			names: `FIRST 2 ("orders-1", "orders-2")`},
		"Required names a standby that does not stream, and writes wait": {
			db: db(3, required(dbv1.SynchronousAny, 2)), insts: []Instance{three[0], three[1], paused(inst(2, standbyAt("orders-2", "0/8"), ""))},
			names: `ANY 2 ("orders-1", "orders-2")`, degraded: true},
		"Required names a standby whose pod is being recreated": {
			db: db(3, required(dbv1.SynchronousAny, 1)), insts: []Instance{three[0], three[1], gone(2)},
			names: `ANY 1 ("orders-1", "orders-2")`},
		"Required with the only standby's pod gone: writes wait, never acknowledged by the primary alone": {
			db: db(2, required(dbv1.SynchronousAny, 1)), insts: []Instance{three[0], gone(1)},
			names: `ANY 1 ("orders-1")`, degraded: true},
		"Required never names a removed instance": {
			db: db(2, required(dbv1.SynchronousAny, 1)), insts: three,
			names: `ANY 1 ("orders-1")`},
		"Preferred names only streaming standbys": {
			db: db(3, preferred(2)), insts: []Instance{three[0], three[1], paused(inst(2, standbyAt("orders-2", "0/8"), ""))},
			names: `ANY 1 ("orders-1")`, degraded: true},
		"Preferred with none streaming waits for nobody": {
			db: db(2, preferred(1)), insts: []Instance{three[0], paused(inst(1, standbyAt("orders-1", "0/8"), ""))},
			names: "", degraded: true},
		"the primary never names itself": {
			db: db(3, required(dbv1.SynchronousAny, 1)), insts: []Instance{inst(0, standbyAt("orders-0", "0/10"), ""), inst(1, primaryAt("orders-1", "0/10"), ""), three[2]},
			names: `ANY 1 ("orders-0", "orders-2")`},
	} {
		t.Run(name, func(t *testing.T) {
			primary := "orders-0"
			for _, i := range tc.insts {
				if i.Agent != nil && i.Agent.Role == agentapi.RolePrimary {
					primary = i.Name
				}
			}
			st := synchronousFor(tc.db, tc.insts, primary)
			assert.Equal(t, tc.names, standbyNames(st))
			if tc.db.Spec.HighAvailability.Synchronous == nil {
				assert.Nil(t, st)
				return
			}
			require.NotNil(t, st)
			assert.Equal(t, tc.degraded, st.Degraded)
		})
	}
}

// TestSynchronousOnThePrimary: the controller sets synchronous_standby_names
// on the primary and records it, follows the standbys that exist, and
// resets it when synchronous replication is switched off; the replication
// role may run pg_rewind.
func TestSynchronousOnThePrimary(t *testing.T) {
	f, s := converged(t, 3)
	assert.ElementsMatch(t, rewindFunctions, f.servers.Executes(f.db, agentapi.ReplicationUser), "pg_rewind cannot read the primary")
	assert.Equal(t, "", f.servers.SynchronousStandbyNames(f.db))

	db := f.get()
	db.Spec.HighAvailability.Synchronous = &dbv1.SynchronousSpec{Method: dbv1.SynchronousAny, Number: 1, DataDurability: dbv1.DataDurabilityRequired}
	require.NoError(t, f.c.Update(context.Background(), db))
	f.step(s)
	assert.Equal(t, `ANY 1 ("orders-1", "orders-2")`, f.servers.SynchronousStandbyNames(f.db))
	st := f.get().Status.Replication.Synchronous
	require.NotNil(t, st)
	assert.Equal(t, []string{"orders-1", "orders-2"}, st.Standbys)
	assert.Equal(t, int32(1), st.Number)
	assert.False(t, st.Degraded)
	reloads := f.servers.Reloads(f.db)
	f.step(s)
	assert.Equal(t, reloads, f.servers.Reloads(f.db), "reloaded without a change")

	// A standby's pod gone (being recreated) stays named under Required:
	// commits still reach one standby, and dropping it could leave the
	// primary acknowledging alone. Scaling down drops it.
	f.lose("orders-2")
	f.step(s)
	assert.Equal(t, `ANY 1 ("orders-1", "orders-2")`, f.servers.SynchronousStandbyNames(f.db))
	assert.False(t, f.get().Status.Replication.Synchronous.Degraded, "orders-1 still confirms")

	db = f.get()
	db.Spec.HighAvailability.Synchronous = nil
	require.NoError(t, f.c.Update(context.Background(), db))
	f.step(s)
	assert.Equal(t, "", f.servers.SynchronousStandbyNames(f.db))
	assert.Nil(t, f.get().Status.Replication.Synchronous)
}
