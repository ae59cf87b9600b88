package replication

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/postgres"
)

// TestLostSlotIsMadeAgain runs the controller's SQL against a local
// PostgreSQL (max_slot_wal_keep_size = 1MB) as the primary of a converged
// Database of two instances (fake agents). The standby's slot, which no
// standby holds, falls behind: WAL switched without a checkpoint leaves it
// 'unreserved', which ReplicationReady's message names; a checkpoint
// invalidates it ('lost'). The next pass, with nothing else changed (the
// fingerprint of the SQL state is the same), drops it and makes it again
// reserving WAL at once ('reserved'), with a Warning Event naming the
// standby and the slot, and the message names it while the standby does
// not stream. Once it streams, the message forgets it and further passes
// neither touch the slot nor write anything. Last, a lost slot held by a
// WAL sender (pg_receivewal; the listing as PostgreSQL 16 and 17 give it
// for a standby streaming through an invalidated slot): its backend is
// terminated, and the slot made again. Before the fix the slot stayed
// 'lost' (the fingerprint cache skipped the slots) and no Event came.
func TestLostSlotIsMadeAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a local PostgreSQL server")
	}
	if _, err := postgres.BinDir(); err != nil {
		t.Skip(err)
	}
	start := time.Now()
	srv := postgres.StartWith(t, postgres.Options{Prepare: func(string, int, int) []string {
		return []string{"-c", "max_slot_wal_keep_size=1MB", "-c", "checkpoint_timeout=1h"}
	}})
	ctx := context.Background()
	f := newFixture(t, 2)
	superuser := &corev1.Secret{}
	require.NoError(t, f.c.Get(ctx, client.ObjectKey{Namespace: f.db.Namespace, Name: resources.SuperuserSecretName(f.db)}, superuser))
	superuser.Data[engine.UsernameKey], superuser.Data[engine.PasswordKey] = []byte(postgres.Superuser), []byte(srv.Password)
	require.NoError(t, f.c.Update(ctx, superuser))
	s := f.syncer()
	s.instances = srv.Connector()
	f.run(s, 9)
	require.Equal(t, dbv1.ReasonReplicating, f.condition().Reason, f.condition().Message)

	slot := agentapi.SlotName("orders-1")
	walStatus := func() string {
		return srv.SQL(t, "postgres", "SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name = '"+slot+"'")
	}
	require.Equal(t, "reserved", walStatus(), "the controller made the standby's slot, reserving WAL")
	f.eventsText()

	// orders-1 stops streaming; the primary writes on.
	f.agents.SetPaused(f.db, "orders-1", true)
	srv.SQL(t, "postgres", "CREATE TABLE t (id int)")
	require.Eventually(t, func() bool {
		srv.SQL(t, "postgres", "INSERT INTO t SELECT generate_series(1, 1000)")
		srv.SQL(t, "postgres", "SELECT pg_switch_wal()")
		return walStatus() == "unreserved"
	}, 30*time.Second, 10*time.Millisecond, "the slot about to lose its WAL")
	f.step(s)
	c := f.condition()
	assert.Contains(t, c.Message, slot+" of orders-1 is about to lose", "an unreserved slot is named")
	assert.Equal(t, "unreserved", walStatus(), "an unreserved slot is left as it is")

	require.Eventually(t, func() bool {
		srv.SQL(t, "postgres", "INSERT INTO t SELECT generate_series(1, 1000)")
		srv.SQL(t, "postgres", "SELECT pg_switch_wal()")
		srv.SQL(t, "postgres", "CHECKPOINT")
		return walStatus() == "lost"
	}, 30*time.Second, 10*time.Millisecond, "the slot invalidated")

	f.step(s)
	assert.Equal(t, "reserved", walStatus(), "the lost slot was made again, reserving WAL")
	assert.Equal(t, "t", srv.SQL(t, "postgres", "SELECT (restart_lsn IS NOT NULL)::text::char FROM pg_replication_slots WHERE slot_name = '"+slot+"'"))
	ev := f.eventsText()
	assert.Contains(t, ev, "Warning "+ReasonReplicationSlotLost)
	assert.Contains(t, ev, slot)
	assert.Contains(t, ev, "orders-1")
	c = f.condition()
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Contains(t, c.Message, slot+" of orders-1 had lost")

	// Streaming again (cloned, or its WAL was still there): the message
	// forgets the slot, and a converged Database is left alone.
	f.agents.SetPaused(f.db, "orders-1", false)
	f.step(s)
	f.eventsText()
	c = f.condition()
	assert.Equal(t, dbv1.ReasonReplicating, c.Reason, c.Message)
	assert.NotContains(t, c.Message, slot)
	before := f.get().ResourceVersion
	f.run(s, 3)
	assert.Equal(t, before, f.get().ResourceVersion, "no write while nothing changes")
	assert.Empty(t, f.eventsText())
	assert.Equal(t, "reserved", walStatus())

	// A WAL sender holds the slot while it is lost: PostgreSQL 16 and 17
	// let a standby (cloned again) stream through an invalidated slot,
	// which stays 'lost' and keeps it no WAL. PostgreSQL 15, run here,
	// revives a slot streamed through (wal_status reserved again), so the
	// listing is the one 16 and 17 give, and the rest is real:
	// pg_receivewal holds the slot as a standby's WAL receiver does.
	dir := t.TempDir()
	recv := exec.Command(filepath.Join(srv.Bin, "pg_receivewal"), "--no-loop", "--no-password", "--slot="+slot, "-D", dir)
	recv.Env = append(os.Environ(), srv.Env(postgres.Superuser, srv.Password)...)
	var out bytes.Buffer
	recv.Stdout, recv.Stderr = &out, &out
	require.NoError(t, recv.Start())
	exited := make(chan error, 1)
	go func() { exited <- recv.Wait() }()
	t.Cleanup(func() { _ = recv.Process.Kill() })
	var pid string
	require.Eventually(t, func() bool {
		pid = srv.SQL(t, "postgres", "SELECT coalesce(active_pid::text, '') FROM pg_replication_slots WHERE slot_name = '"+slot+"'")
		return pid != ""
	}, 10*time.Second, 10*time.Millisecond, "pg_receivewal holds the slot")
	conn, err := srv.Connector().Connect(ctx, f.db, instance.Login{User: postgres.Superuser, Password: srv.Password}, "")
	require.NoError(t, err)
	defer conn.Close(ctx)
	plan := &Plan{CurrentPrimary: "orders-0", Slots: []string{slot}, Rows: []dbv1.InstanceStatus{{Name: "orders-0"}, {Name: "orders-1"}}}
	pending, err := s.ensureSlots(ctx, conn, f.db, plan, nil, map[string]slotState{slot: {active: true, walStatus: "lost", pid: pid}})
	require.NoError(t, err)
	assert.Empty(t, pending)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("pg_receivewal still runs: %s", out.String())
	}
	assert.Equal(t, "reserved", walStatus(), "the held slot was made again")
	assert.Equal(t, "false", srv.SQL(t, "postgres", "SELECT active::text FROM pg_replication_slots WHERE slot_name = '"+slot+"'"))
	assert.Contains(t, f.eventsText(), "Warning "+ReasonReplicationSlotLost)
	t.Logf("pg_receivewal: %s", strings.TrimSpace(out.String()))
	t.Logf("MEASURED %s", time.Since(start).Round(time.Millisecond))
}

// slotConn is an instance.Conn that lists slots as given and records the
// statements it runs.
type slotConn struct {
	listing string
	stmts   []string
}

func (c *slotConn) QueryValue(_ context.Context, sql string) (*string, bool, error) {
	c.stmts = append(c.stmts, sql)
	if sql == slotsQuery {
		v := c.listing
		return &v, true, nil
	}
	return nil, false, nil
}

func (c *slotConn) Exec(_ context.Context, sql string) ([]string, error) {
	c.stmts = append(c.stmts, sql)
	return nil, nil
}

func (c *slotConn) Close(context.Context) error { return nil }

// TestActiveLostSlotIsMadeAgain: a lost slot still held by a WAL sender
// (its standby retries on it) has that backend terminated, then is
// dropped and made again; a removed instance's lost slot is just dropped.
func TestActiveLostSlotIsMadeAgain(t *testing.T) {
	f := newFixture(t, 3)
	s := f.syncer()
	conn := &slotConn{listing: "dbkeeper_orders_1=true=lost=4242,dbkeeper_orders_2=false=reserved=,dbkeeper_orders_5=false=lost="}
	plan := &Plan{CurrentPrimary: "orders-0", Slots: []string{"dbkeeper_orders_1", "dbkeeper_orders_2"},
		Rows: []dbv1.InstanceStatus{{Name: "orders-0"}, {Name: "orders-1"}, {Name: "orders-2"}}}
	have, err := listSlots(context.Background(), conn)
	require.NoError(t, err)
	pending, err := s.ensureSlots(context.Background(), conn, f.db, plan, nil, have)
	require.NoError(t, err)
	assert.Empty(t, pending)
	var changes []string
	for _, st := range conn.stmts {
		if !strings.HasPrefix(st, "SELECT coalesce(") {
			changes = append(changes, st)
		}
	}
	assert.Equal(t, []string{
		"SELECT pg_catalog.pg_terminate_backend(active_pid, 5000) FROM pg_catalog.pg_replication_slots WHERE slot_name = 'dbkeeper_orders_1' AND active_pid IS NOT NULL",
		"SELECT pg_catalog.pg_drop_replication_slot('dbkeeper_orders_1')",
		"SELECT pg_catalog.pg_create_physical_replication_slot('dbkeeper_orders_1', true)",
		"SELECT pg_catalog.pg_drop_replication_slot('dbkeeper_orders_5')",
	}, changes)
	ev := f.eventsText()
	assert.Contains(t, ev, "Warning "+ReasonReplicationSlotLost)
	assert.Contains(t, ev, "The replication slot dbkeeper_orders_1 of the standby orders-1 on the primary orders-0 had lost")
	assert.NotContains(t, ev, "dbkeeper_orders_2")
}
