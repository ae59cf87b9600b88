package realnode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
	"github.com/dbkeeper/dbkeeper/test/framework/operator"
)

// replicated is a Database of PostgreSQL 17 with n instances.
func replicated(ns, name string, n int32) *dbv1.Database {
	return newDatabase(ns, name, "17", func(d *dbv1.Database) { d.Spec.Replicas = ptr.To(n) })
}

// startReplicated runs an operator on a new namespace and a Database of
// n instances there, and waits until it is Ready with <name>-0 the
// primary and every standby streaming.
func startReplicated(t *testing.T, name string, n int32) (*dbv1.Database, *operator.Operator) {
	t.Helper()
	ns := newNamespace(t)
	op := startOperator(t, ns)
	db := replicated(ns, name, n)
	create(t, db)
	waitReady(t, db)
	waitTopology(t, db, resources.InstanceName(db, 0), int(n))
	return db, op
}

// serviceTarget connects from the test process to one of the Database's
// Services with the generated Secret's credentials.
func serviceTarget(t *testing.T, db *dbv1.Database, service string) sqlconn.Target {
	t.Helper()
	target, err := dbtest.ServiceTarget(context.Background(), k8s, db.Namespace, service, resources.GeneratedSecretName(db))
	require.NoError(t, err)
	return target
}

// superuserTarget is target as db's superuser (dbtest.AsSuperuser: a
// client certificate where the server asks for one).
func superuserTarget(t *testing.T, db *dbv1.Database, target sqlconn.Target) sqlconn.Target {
	t.Helper()
	super, err := dbtest.AsSuperuser(context.Background(), k8s, db, target)
	require.NoError(t, err)
	return super
}

// sqlValue runs one query through target, retrying while the server
// cannot be reached (kube-proxy moves endpoints a moment after a pod's
// readiness changes).
func sqlValue(t *testing.T, target sqlconn.Target, sql string) string {
	t.Helper()
	var out string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		v, err := sqlOnce(target, sql)
		if assert.NoError(ct, err, "%s on %s", sql, target) {
			out = v
		}
	}, timeout, 200*time.Millisecond)
	return out
}

func sqlOnce(target sqlconn.Target, sql string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := sqlconn.Connect(ctx, target)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	v, _, err := conn.QueryValue(ctx, sql)
	if err != nil || v == nil {
		return "", err
	}
	return *v, nil
}

// waitTopology waits until the Database reports primary as its current
// (and target) primary, ReplicationReady True with every one of n
// instances ready and every standby streaming, and exactly one pod
// labelled primary — primary — and the others replica. An empty primary
// accepts whichever instance the Database reports (a fault may have made
// it fail over): the returned Database names it.
func waitTopology(t *testing.T, db *dbv1.Database, want string, n int) *dbv1.Database {
	t.Helper()
	var live *dbv1.Database
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		live = dbtest.Get(ct, k8s, db)
		r := live.Status.Replication
		if !assert.NotNil(ct, r, "status.replication") {
			return
		}
		primary := want
		if primary == "" {
			primary = r.CurrentPrimary
			assert.NotEmpty(ct, primary, "currentPrimary")
		}
		assert.Equal(ct, primary, r.CurrentPrimary, "currentPrimary")
		assert.Equal(ct, primary, r.TargetPrimary, "targetPrimary")
		cond := findCondition(live, dbv1.ConditionReplicationReady)
		if assert.NotNil(ct, cond) {
			assert.Equal(ct, metav1.ConditionTrue, cond.Status, "ReplicationReady: %s %s", cond.Reason, cond.Message)
		}
		assert.Len(ct, r.Instances, n, "instances")
		for _, in := range r.Instances {
			assert.True(ct, in.Ready, "%s ready", in.Name)
			if in.Name == primary {
				assert.Equal(ct, dbv1.RolePrimary, in.Role, in.Name)
				continue
			}
			assert.Equal(ct, dbv1.RoleReplica, in.Role, in.Name)
			assert.Equal(ct, "streaming", in.WALReceiver, in.Name)
		}
		labels := map[string]string{}
		for _, p := range podsOf(t, db) {
			labels[p.Name] = p.Labels[dbv1.LabelRole]
		}
		assert.Len(ct, labels, n, "pods")
		for name, role := range labels {
			want := dbv1.RoleReplica
			if name == primary {
				want = dbv1.RolePrimary
			}
			assert.Equal(ct, want, role, "role label of %s", name)
		}
	}, timeout, 250*time.Millisecond)
	return live
}

func findCondition(db *dbv1.Database, condType string) *metav1.Condition {
	for i := range db.Status.Conditions {
		if db.Status.Conditions[i].Type == condType {
			return &db.Status.Conditions[i]
		}
	}
	return nil
}

// switchover asks for a switchover to target and waits until it is the
// primary with the topology whole again.
func switchover(t *testing.T, db *dbv1.Database, target string, n int) {
	t.Helper()
	requestSwitchover(t, db, target)
	waitTopology(t, db, target, n)
}

// requestSwitchover sets the switchover annotation to target.
func requestSwitchover(t *testing.T, db *dbv1.Database, target string) {
	t.Helper()
	dbtest.Patch(t, k8s, db, func(d *dbv1.Database) {
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations[dbv1.AnnotationSwitchoverTo] = target
	})
}

// readOnlyRefusal says whether err is PostgreSQL refusing a write in a
// read-only transaction (a hot standby): SQLSTATE 25006.
func readOnlyRefusal(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "25006"
}

// TestReplicasStreamAndSwitchOver: a Database of three instances has one
// primary behind <name> and two streaming hot standbys behind <name>-ro;
// a row written through <name> is read through <name>-ro within a
// measured bound; <name>-ro refuses writes; ten planned switchovers while
// a writer inserts unique ids lose no acknowledged id, and the write
// unavailability of each is measured.
func TestReplicasStreamAndSwitchOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := startReplicated(t, "orders", 3)

	rw := serviceTarget(t, db, resources.ClientServiceName(db))
	ro := serviceTarget(t, db, resources.ReadOnlyServiceName(db))
	assert.Equal(t, "f", sqlValue(t, rw, "SELECT pg_is_in_recovery()"), "<name> reaches the primary")
	assert.Equal(t, "t", sqlValue(t, ro, "SELECT pg_is_in_recovery()"), "<name>-ro reaches a standby")
	// a dead standby's slot cannot keep more WAL than this on the primary
	keep := sqlValue(t, rw, "SHOW max_slot_wal_keep_size")
	assert.NotEqual(t, "-1", keep, "max_slot_wal_keep_size bounds what a slot keeps")
	t.Logf("max_slot_wal_keep_size %s, wal_log_hints %s", keep, sqlValue(t, rw, "SHOW wal_log_hints"))
	_, err := sqlOnce(ro, "CREATE TABLE refused (id int)")
	assert.True(t, readOnlyRefusal(err), "a write through <name>-ro is refused as read-only, got %v", err)

	t.Log("replication lag: a row written through <name> read through <name>-ro")
	sqlValue(t, rw, "CREATE TABLE lag (id int PRIMARY KEY)")
	var lags []time.Duration
	for i := 1; i <= 20; i++ {
		sqlValue(t, rw, fmt.Sprintf("INSERT INTO lag VALUES (%d) RETURNING id", i))
		start := time.Now()
		for {
			v, err := sqlOnce(ro, fmt.Sprintf("SELECT count(*) FROM lag WHERE id = %d", i))
			if err == nil && v == "1" {
				break
			}
			require.Less(t, time.Since(start), 30*time.Second, "row %d never reached <name>-ro (last error %v)", i, err)
			time.Sleep(5 * time.Millisecond)
		}
		lags = append(lags, time.Since(start))
	}
	t.Logf("MEASURED read-your-write through <name>-ro over %d rows: p50 %s, max %s (each includes a new TLS connection)",
		len(lags), dbtest.Percentile(lags, 50).Round(time.Millisecond), slices.Max(lags).Round(time.Millisecond))
	assert.Less(t, slices.Max(lags), 5*time.Second, "a row reaches the standbys within 5 s")

	t.Log("ten switchovers with a writer running")
	w, err := dbtest.StartWriter(ctx, rw, "acks")
	require.NoError(t, err)
	defer w.Stop()
	var gaps []time.Duration
	for i := range 10 {
		target := resources.InstanceName(db, (i+1)%3)
		before := w.AckCount()
		start := time.Now()
		switchover(t, db, target, 3)
		require.Eventually(t, func() bool { return w.AckCount() > before+10 }, timeout, 50*time.Millisecond,
			"writes acknowledged again after the switchover to %s", target)
		gaps = append(gaps, w.LongestGap(start))
		t.Logf("switchover %d to %s: done in %s, writes unavailable for %s", i+1, target,
			time.Since(start).Round(time.Millisecond), gaps[i].Round(time.Millisecond))
		assert.Equal(t, "f", sqlValue(t, rw, "SELECT pg_is_in_recovery()"), "<name> reaches the new primary")
	}
	w.Stop()
	t.Logf("MEASURED write unavailability over %d switchovers: p50 %s, max %s; %d writes acknowledged, %d attempts failed",
		len(gaps), dbtest.Percentile(gaps, 50).Round(time.Millisecond), slices.Max(gaps).Round(time.Millisecond), w.AckCount(), w.Failed())
	missing, err := w.Missing(ctx, rw)
	require.NoError(t, err)
	assert.Empty(t, missing, "acknowledged ids lost by the switchovers")
	require.Greater(t, w.AckCount(), 100, "the writer wrote")

	live := dbtest.Get(t, k8s, db)
	assert.Empty(t, live.Annotations[dbv1.AnnotationSwitchoverTo], "the switchover annotation is removed once done")
	// every primary made slots for its standbys; after ten switchovers the
	// primary has exactly one per standby, each in use and keeping WAL
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		v, err := sqlOnce(rw, "SELECT string_agg(slot_name || ':' || active || ':' || coalesce(wal_status, ''), ',' ORDER BY slot_name) FROM pg_replication_slots")
		assert.NoError(ct, err)
		assert.Equal(ct, "dbkeeper_orders_0:true:reserved,dbkeeper_orders_2:true:reserved", v, "the slots on the primary orders-1")
	}, timeout, time.Second)
	for _, in := range live.Status.Replication.Instances {
		assert.Greater(t, in.Timeline, int64(10), "%s followed every promotion (timeline %d)", in.Name, in.Timeline)
	}
}

// slots lists the replication slots on the primary.
func slots(t *testing.T, superuser sqlconn.Target) []string {
	t.Helper()
	v := sqlValue(t, superuser, "SELECT coalesce(string_agg(slot_name, ',' ORDER BY slot_name), '') FROM pg_replication_slots")
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// TestScaleKeepsDataAndPrimary: 1 → 3 → 2 → 1 keeps every row and the
// primary at each step; scaling below the primary's ordinal switches over
// first; a removed standby leaves no slot behind.
func TestScaleKeepsDataAndPrimary(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startOperator(t, ns)
	db := replicated(ns, "scaled", 1)
	create(t, db)
	waitReady(t, db)
	p0, p1, p2 := resources.InstanceName(db, 0), resources.InstanceName(db, 1), resources.InstanceName(db, 2)
	waitTopology(t, db, p0, 1)
	rw := serviceTarget(t, db, resources.ClientServiceName(db))
	super := superuserTarget(t, db, rw)
	sqlValue(t, rw, "CREATE TABLE items AS SELECT g AS id FROM generate_series(1, 1000) g")
	count := "SELECT count(*) || '|' || sum(id) FROM items"
	want := sqlValue(t, rw, count)

	t.Log("1 → 3")
	dbtest.Patch(t, k8s, db, func(d *dbv1.Database) { d.Spec.Replicas = ptr.To[int32](3) })
	waitTopology(t, db, p0, 3)
	ro := serviceTarget(t, db, resources.ReadOnlyServiceName(db))
	assert.Equal(t, want, sqlValue(t, ro, count), "the standbys hold every row")
	assert.ElementsMatch(t, []string{"dbkeeper_scaled_1", "dbkeeper_scaled_2"}, slots(t, super), "a slot per standby")

	t.Log("the primary moves to the last instance, then 3 → 2 must switch over first")
	switchover(t, db, p2, 3)
	dbtest.Patch(t, k8s, db, func(d *dbv1.Database) { d.Spec.Replicas = ptr.To[int32](2) })
	live := waitTopology(t, db, waitPrimaryAmong(t, db, p0, p1), 2)
	assert.Equal(t, want, sqlValue(t, rw, count), "after 3 → 2")
	assert.Len(t, slots(t, super), 1, "the removed instance's slot is dropped: %v", slots(t, super))
	sqlValue(t, rw, "INSERT INTO items VALUES (1001) RETURNING id")
	want = sqlValue(t, rw, count)

	t.Log("2 → 1")
	primary := live.Status.Replication.CurrentPrimary
	dbtest.Patch(t, k8s, db, func(d *dbv1.Database) { d.Spec.Replicas = ptr.To[int32](1) })
	waitTopology(t, db, p0, 1)
	if primary != p0 {
		t.Logf("the primary was %s: switched over to %s before the scale-down", primary, p0)
	}
	assert.Equal(t, want, sqlValue(t, rw, count), "after 2 → 1")
	assert.Empty(t, slots(t, super), "no slot left without standbys")
	waitReady(t, db)
	pods := &corev1.PodList{}
	require.NoError(t, k8s.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels(resources.PodSelectorLabels(db))))
	assert.Len(t, pods.Items, 1)
}

// waitPrimaryAmong waits until the current primary is one of names, and
// returns it.
func waitPrimaryAmong(t *testing.T, db *dbv1.Database, names ...string) string {
	t.Helper()
	var got string
	require.Eventually(t, func() bool {
		live := dbtest.Get(t, k8s, db)
		if live.Status.Replication == nil {
			return false
		}
		got = live.Status.Replication.CurrentPrimary
		return slices.Contains(names, got) && got == live.Status.Replication.TargetPrimary
	}, timeout, 250*time.Millisecond, "a primary among %v", names)
	return got
}

// primaries records the distinct current primaries the Database reports,
// in order, while it runs.
type primaries struct {
	stop chan struct{}
	done chan []string
}

func watchPrimaries(t *testing.T, db *dbv1.Database) *primaries {
	p := &primaries{stop: make(chan struct{}), done: make(chan []string, 1)}
	go func() {
		var seen []string
		for {
			live := &dbv1.Database{}
			if k8s.Get(context.Background(), client.ObjectKeyFromObject(db), live) == nil && live.Status.Replication != nil {
				if c := live.Status.Replication.CurrentPrimary; c != "" && (len(seen) == 0 || seen[len(seen)-1] != c) {
					seen = append(seen, c)
				}
			}
			select {
			case <-p.stop:
				p.done <- seen
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return p
}

func (p *primaries) Stop() []string {
	close(p.stop)
	return <-p.done
}

// TestRolloutCostsOneSwitchover: a pod template change, here the catalog
// moving to a new minor release as a new dbkeeper release does (the
// operator restarted with another image for version 17), restarts the
// standbys first, then switches over once, then restarts the former
// primary; a writer running through <name> loses no acknowledged id.
func TestRolloutCostsOneSwitchover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, op := startReplicated(t, "rolled", 3)
	rw := serviceTarget(t, db, resources.ClientServiceName(db))
	w, err := dbtest.StartWriter(ctx, rw, "acks")
	require.NoError(t, err)
	defer w.Stop()
	before := map[string]string{}
	for _, p := range podsOf(t, db) {
		before[p.Name] = string(p.UID)
	}

	// The next minor: the same content under another tag, as the
	// catalog of the next release names it.
	current, err := images.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	image, err := current.Image("17")
	require.NoError(t, err)
	next := image[:strings.LastIndex(image, ":")] + ":17-next-minor"
	require.NoError(t, theNode.TagImage(image, next))
	catalog, err := engine.NewCatalog("", "postgres:17="+next)
	require.NoError(t, err)
	opts := operatorOptions(t, db.Namespace)
	opts.Engines = catalog

	watch := watchPrimaries(t, db)
	start := time.Now()
	op.Stop()
	operator.Start(t, local.Config, opts)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		for _, p := range podsOf(t, db) {
			assert.NotEqual(ct, before[p.Name], string(p.UID), "%s restarted", p.Name)
			assert.True(ct, podReady(&p), "%s ready", p.Name)
			assert.Equal(ct, next, p.Spec.Containers[0].Image, "%s runs the new minor (its engine container)", p.Name)
		}
	}, 2*timeout, time.Second, "every pod restarted on the new image")
	live := waitReady(t, db)
	seen := watch.Stop()
	t.Logf("MEASURED rollout of 3 instances: %s, primaries in order %v, writes unavailable at most %s",
		time.Since(start).Round(time.Second), seen, w.LongestGap(start).Round(time.Millisecond))
	assert.Len(t, seen, 2, "one switchover: the primaries were %v", seen)
	waitTopology(t, db, live.Status.Replication.CurrentPrimary, 3)
	w.Stop()
	missing, err := w.Missing(ctx, rw)
	require.NoError(t, err)
	assert.Empty(t, missing, "acknowledged ids lost by the rollout")
}

// TestOperatorKilledMidSwitchover: the operator stopped at a random point
// of a switchover and started again converges to exactly one primary,
// labelled and behind <name>, losing no acknowledged write.
func TestOperatorKilledMidSwitchover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, op := startReplicated(t, "killed", 3)
	ns := db.Namespace
	rw := serviceTarget(t, db, resources.ClientServiceName(db))
	w, err := dbtest.StartWriter(ctx, rw, "acks")
	require.NoError(t, err)
	defer w.Stop()
	for i, delay := range []time.Duration{0, 300 * time.Millisecond, 900 * time.Millisecond, 1800 * time.Millisecond, 3 * time.Second} {
		target := resources.InstanceName(db, (i+1)%3)
		requestSwitchover(t, db, target)
		// the switchover has begun once the target is written
		require.Eventually(t, func() bool {
			r := dbtest.Get(t, k8s, db).Status.Replication
			return r != nil && r.TargetPrimary == target
		}, timeout, 20*time.Millisecond, "the switchover to %s begins", target)
		time.Sleep(delay)
		op.Stop()
		mid := dbtest.Get(t, k8s, db).Status.Replication
		t.Logf("operator stopped %s into the switchover to %s: current %s, target %s, switchoverLSN %q",
			delay, target, mid.CurrentPrimary, mid.TargetPrimary, mid.SwitchoverLSN)
		time.Sleep(2 * time.Second)
		op = startOperator(t, ns)
		waitTopology(t, db, target, 3)
		assert.Equal(t, "f", sqlValue(t, rw, "SELECT pg_is_in_recovery()"), "<name> reaches the primary")
	}
	w.Stop()
	missing, err := w.Missing(ctx, rw)
	require.NoError(t, err)
	assert.Empty(t, missing, "acknowledged ids lost")
}

func resourceQuantity(s string) resource.Quantity { return resource.MustParse(s) }
