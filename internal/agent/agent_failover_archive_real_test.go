package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// TestPointInTimeRecoveryAcrossAFailover: a primary and its streaming
// standby share the Database's repository (the StatefulSet gives every
// instance the same one) and a Lease on a real kube-apiserver. After a
// base backup through the primary's agent, rows of a ledger are
// committed one transaction each, the last ones after a segment the
// primary completes while the store does not answer; then the primary's
// node is lost (its agent, postmaster and everything under them get
// SIGKILL at once) with that segment never archived, and the standby
// fails over once the lease expired, on timeline 2, and commits more
// rows. The archive has no hole: the segment the lost primary did not
// push is there (the standby archives what it receives), with the new
// timeline's history file, the old timeline's last segment (.partial)
// and the new primary's segments. New instances restored to the commit
// time of a row before the failover (T1) and of one after it (T2) each
// have exactly the rows committed at or before their target, the second
// through timeline 2.
func TestPointInTimeRecoveryAcrossAFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, an object store and a kube-apiserver; skipped under -short")
	}
	leases, restCfg := startLeaseAPI(t)
	ctx := context.Background()
	holder := leaseHolder(t, leases)
	c := newCluster(t)
	c.serverArgs = []string{"-c", "track_commit_timestamp=on"}
	f := newArchiveFixture(t, c)

	// both instances: the Database's repository and its lease.
	const repoPath = "/dbkeeper/ns/orders/uid-1"
	env := append([]string{f.env(t, repoPath)}, c.leaseEnv(t, restCfg)...)
	a := c.start("db-0", env...)
	b := c.start("db-1", env...)
	_, err := c.client.Bootstrap(ctx, a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	c.waitStatus(a, 2*time.Minute, "a primary with its repository ready", func(s agentapi.Status) bool {
		return runningAs(agentapi.RolePrimary)(s) && s.Archive != nil && s.Archive.StanzaReady
	})
	pa := sql(t, a)
	mustExec(t, pa, fmt.Sprintf("CREATE ROLE %s WITH LOGIN REPLICATION PASSWORD '%s'", agentapi.ReplicationUser, strings.ReplaceAll(replPassword, "'", "''")))
	mustExec(t, pa, "SELECT pg_create_physical_replication_slot($1)", agentapi.SlotName(b.name))
	mustExec(t, pa, "CREATE TABLE ledger (id int PRIMARY KEY)")
	c.proxy.target.Store(int32(a.port))
	_, err = c.client.Bootstrap(ctx, b.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapClone})
	require.NoError(t, err)
	c.waitStatus(b, 2*time.Minute, "a streaming standby", func(s agentapi.Status) bool {
		return runningAs(agentapi.RoleReplica)(s) && s.WALReceiver == "streaming"
	})

	_, err = c.client.Backup(ctx, a.url, agentapi.BackupRequest{ID: "b1", Type: "full"})
	require.NoError(t, err)
	s := c.waitBaseBackups(a, 1)
	// pgBackRest picks the backup by its stop time in whole seconds.
	time.Sleep(time.Until(s.Archive.Backups[0].Finished.Add(time.Second)) + 100*time.Millisecond)

	commitTime := func(in *instance, id int) time.Time {
		var at time.Time
		require.NoError(t, sql(t, in).QueryRow(ctx, "SELECT pg_xact_commit_timestamp(xmin) FROM ledger WHERE id = $1", id).Scan(&at))
		return at
	}
	insert := func(conn *pgx.Conn, from, to int) {
		for i := from; i <= to; i++ {
			mustExec(t, conn, "INSERT INTO ledger VALUES ($1)", i)
		}
	}
	insert(pa, 1, 10)
	// the store stops answering: the segment of rows 1-10, completed now,
	// is one the primary never archives (its push hangs until the node is
	// lost), as a primary that dies while it pushes, or behind its archive.
	require.NoError(t, f.store.Pause())
	paused := true
	t.Cleanup(func() {
		if paused {
			_ = f.store.Resume()
		}
	})
	lost := stringQuery(t, pa, "SELECT pg_walfile_name(pg_switch_wal())")
	insert(pa, 11, 20)
	t1 := commitTime(a, 10)
	cur := c.status(a).CurrentLSN
	c.waitStatus(b, 30*time.Second, "the standby replayed every row", func(s agentapi.Status) bool {
		return s.ReplayedLSN != "" && lsn(t, s.ReplayedLSN) >= lsn(t, cur)
	})
	sa := c.status(a)
	require.Less(t, sa.Archive.LastArchivedWAL, lost, "the primary archived %s: the test proves nothing", lost)
	require.Positive(t, sa.Archive.WaitingSegments)

	// the primary's node is lost; the store answers again.
	server := postmasterPID(a.pgdata)
	killed := killTree(t, a.cmd.Process.Pid)
	require.Contains(t, killed, server, "the postmaster was not among the agent's processes")
	<-a.exited
	require.NoError(t, f.store.Resume())
	paused = false

	// the failover: the standby takes the lease once it expired, and
	// promotes.
	code, body := rawPromote(t, c, b, agentapi.PromoteRequest{Failover: true})
	require.Equal(t, http.StatusAccepted, code, "a failover promote: %s", body)
	sb := c.waitStatus(b, agentapi.LeaseDuration+4*agentapi.LeaseRetryPeriod+30*time.Second, "promoted", runningAs(agentapi.RolePrimary))
	require.EqualValues(t, 2, sb.Timeline)
	assert.Equal(t, "db-1", holder())
	c.proxy.target.Store(int32(b.port))

	pb := sql(t, b)
	insert(pb, 21, 40)
	t2 := commitTime(b, 30)
	segment := stringQuery(t, pb, "SELECT pg_walfile_name(pg_switch_wal())")
	sb = c.waitStatus(b, 2*time.Minute, "segment "+segment+" archived", func(s agentapi.Status) bool {
		return s.Archive != nil && s.Archive.LastArchivedWAL >= segment
	})
	// the segments both instances pushed are the same files.
	assert.Zero(t, sb.Archive.FailedCount, "a push of the new primary failed: %s", sb.Archive.LastFailure)
	// the history file, and the old timeline's segment in which the new
	// one begins, as PostgreSQL archives it at the promotion.
	history := stringQuery(t, pb, "SELECT pg_read_file('pg_wal/00000002.history')")
	from, _, ok := strings.Cut(strings.TrimPrefix(history, "1\t"), "\t")
	require.True(t, ok, "the history file: %q", history)
	partial := "00000001" + stringQuery(t, pb, "SELECT pg_walfile_name($1::pg_lsn)", from)[8:] + ".partial"
	archived := strings.TrimPrefix(repoPath, "/") + "/archive/"
	keys, err := f.store.List(ctx, f.bucket, archived)
	require.NoError(t, err)
	assert.True(t, containsSuffix(keys, "00000002.history"), "the new timeline's history file is not in the store: %v", keys)
	assert.True(t, containsSuffix(keys, partial), "the old timeline's last segment %s is not in the store: %v", partial, keys)
	// the segment the lost primary never archived: every restore past the
	// base backup replays it.
	require.True(t, containsSuffix(keys, lost), "%s, which the lost primary completed but never archived, is not in the store "+
		"(the standby had it): the archive has a hole there: %v", lost, keys)
	// a base backup of the promoted primary, which still runs with the
	// archive_mode=always it started with as a standby: pgBackRest's own
	// check refused it (archive_mode=always not supported) until the
	// agent told it why that is right (archive-mode-check=n).
	c.waitStatus(b, 2*time.Minute, "the new primary's repository ready", func(s agentapi.Status) bool {
		return s.Archive != nil && s.Archive.StanzaReady
	})
	_, err = c.client.Backup(ctx, b.url, agentapi.BackupRequest{ID: "b2", Type: "full"})
	require.NoError(t, err)
	c.waitBaseBackups(b, 2)

	// what each restore must have, by the server's commit timestamps.
	want := func(target time.Time) int {
		return count(t, pb, "SELECT count(*) FROM ledger WHERE pg_xact_commit_timestamp(xmin) <= $1", target)
	}
	require.Equal(t, 10, want(t1))
	require.Equal(t, 30, want(t2))

	// two new instances, restored to T1 and T2 at once.
	targets := []time.Time{t1, t2}
	restored := []*instance{c.start("db-2"), c.start("db-3")}
	for i, in := range restored {
		_, err := c.client.Bootstrap(ctx, in.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapRestore,
			Recovery: f.recoverySource(repoPath, agentapi.RecoveryTarget{Time: targets[i].Format(time.RFC3339Nano)})})
		require.NoError(t, err)
	}
	for i, in := range restored {
		s := c.waitStatus(in, 3*time.Minute, "recovered and promoted", runningAs(agentapi.RolePrimary))
		n := want(targets[i])
		conn := sql(t, in)
		assert.Equal(t, n, count(t, conn, "SELECT count(*) FROM ledger"), "%s: rows committed at or before %s", in.name, targets[i])
		assert.Equal(t, n, count(t, conn, "SELECT max(id) FROM ledger"), "%s: a row committed after %s", in.name, targets[i])
		assert.Equal(t, 0, count(t, conn, "SELECT count(*) FROM ledger WHERE pg_xact_commit_timestamp(xmin) > $1", targets[i]))
		t.Logf("%s restored to %s: %d rows, timeline %d", in.name, targets[i].Format(time.RFC3339Nano), n, s.Timeline)
		history := stringQuery(t, conn, "SELECT pg_read_file('pg_wal/' || lpad(to_hex($1::int), 8, '0') || '.history')", s.Timeline)
		t.Logf("%s's timeline history:\n%s", in.name, history)
		if i == 1 {
			// it left timeline 2 past where timeline 2 began.
			assert.GreaterOrEqual(t, s.Timeline, uint32(2), "the restore to T2 is not on the new timeline")
			_, rest, ok := strings.Cut(history, "\n2\t")
			require.True(t, ok, "the restore to T2 did not end on timeline 2")
			end, _, _ := strings.Cut(rest, "\t")
			assert.Greater(t, lsn(t, end), lsn(t, from), "the restore to T2 ended before timeline 2 began")
		}
	}
}
