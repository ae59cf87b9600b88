package plugin_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/plugin"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var now = time.Date(2026, 12, 6, 14, 2, 0, 0, time.UTC)

// replicated is a Database of three instances as the controllers leave
// it after a failover, a base backup and a verification.
func replicated() *dbv1.Database {
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(-d)} }
	db := facettest.Database()
	db.Spec.Replicas = ptr.To[int32](3)
	db.Status = dbv1.DatabaseStatus{
		ObservedGeneration: 1, Phase: "Ready", ReadyReplicas: 3,
		Endpoint: "orders.shop.svc:5432", CredentialsSecret: "orders-credentials",
		Conditions: []metav1.Condition{
			{Type: dbv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready", Message: "every facet is ready", LastTransitionTime: *at(time.Hour)},
			{Type: dbv1.ConditionBackupReady, Status: metav1.ConditionTrue, Reason: "Archiving", Message: "archiving to s3:\n  /dbkeeper/shop/orders", LastTransitionTime: *at(2 * time.Hour)},
		},
		Replication: &dbv1.ReplicationStatus{CurrentPrimary: "orders-1", TargetPrimary: "orders-1",
			LastFailover: &dbv1.FailoverStatus{From: "orders-0", To: "orders-1", Reason: "the primary's agent does not answer",
				StartedAt: *at(30 * time.Minute), FinishedAt: at(30*time.Minute - 5200*time.Millisecond), DiscardedTransactions: ptr.To[int64](0)},
			MajorUpgrade: &dbv1.MajorUpgradeStatus{From: "17", To: "18", Phase: dbv1.MajorUpgradeSucceeded, Primary: "orders-1",
				StartedAt: *at(20 * time.Minute), FinishedAt: at(20*time.Minute - 23*time.Second),
				Message: "the primary orders-1 runs PostgreSQL 18 (pg_upgrade --link); the standbys are cloned from it again"},
			Instances: []dbv1.InstanceStatus{
				{Name: "orders-0", Role: "replica", State: "Running", Ready: true, Timeline: 2, ReplayedLSN: "0/5000060", LagBytes: ptr.To[int64](0), WALReceiver: "streaming"},
				{Name: "orders-1", Role: "primary", State: "Running", Ready: true, Timeline: 2, CurrentLSN: "0/5000060"},
				{Name: "orders-2", Role: "replica", State: "Running", Ready: true, Timeline: 2, ReplayedLSN: "0/4000000", LagBytes: ptr.To[int64](16 << 20), WALReceiver: "streaming"},
			}},
		Backup: &dbv1.BackupStatus{RepositoryPath: "/dbkeeper/shop/orders/orders-uid",
			Archive: &dbv1.ArchiveStatus{LastArchivedWAL: "000000020000000000000004", LastArchivedTime: at(40 * time.Second)},
			LastBaseBackup: &dbv1.BaseBackupStatus{Label: "20261206-120000F", Type: "full", Finished: at(2 * time.Hour), Size: 48 << 20,
				Instance: "orders-0", Note: "copied from standby orders-0"},
			BaseBackups: 2, FirstRecoverabilityPoint: at(26 * time.Hour),
			LastVerification: &dbv1.VerificationStatus{ID: "v1", Finished: at(time.Hour), Succeeded: true, Backup: "20261206-120000F",
				Database: "app", Tables: 3, Rows: 1200}},
		TLS: &dbv1.TLSStatus{SecretName: "orders-tls", SerialNumber: "1a2b", NotAfter: at(-90 * 24 * time.Hour), RenewalTime: at(-60 * 24 * time.Hour)},
	}
	return db
}

// TestStatusGolden: status shows what a person asks first: Ready, the
// primary and the last failover, each instance's lag, the archive, the
// last base backup and its verification, the certificate.
func TestStatusGolden(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, plugin.Status(&out, replicated(), now))
	golden := filepath.Join("testdata", "status.golden.txt")
	if *update {
		require.NoError(t, os.WriteFile(golden, out.Bytes(), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err, "run go test ./internal/plugin -update")
	assert.Equal(t, string(want), out.String())
	for _, fact := range []string{"3 of 3 instances ready, Ready", "Primary:     orders-1", "orders-0 -> orders-1", "16.0 MiB",
		"000000020000000000000004", "(40s ago)", "copied from standby orders-0", "succeeded: 3 tables, 1200 rows", "certificate 1a2b"} {
		assert.Contains(t, out.String(), fact)
	}

	// a Database just applied has no status: still a clear answer, and
	// no heading over nothing
	out.Reset()
	fresh := facettest.Database()
	fresh.Status.Backup = &dbv1.BackupStatus{}
	require.NoError(t, plugin.Status(&out, fresh, now))
	assert.Contains(t, out.String(), "0 of 1 instances ready, not Ready")
	assert.NotContains(t, out.String(), "Backups")
}

// TestStatusAbortedFailover: a failover abandoned because the lost
// primary came back holding the lease reads as abandoned, not as one still
// running or one that discarded something.
func TestStatusAbortedFailover(t *testing.T) {
	db := replicated()
	db.Status.Replication.CurrentPrimary, db.Status.Replication.TargetPrimary = "orders-0", "orders-0"
	f := db.Status.Replication.LastFailover
	f.FinishedAt, f.DiscardedTransactions = nil, nil
	f.AbortedAt = &metav1.Time{Time: f.StartedAt.Add(1200 * time.Millisecond)}
	var out bytes.Buffer
	require.NoError(t, plugin.Status(&out, db, now))
	assert.Contains(t, out.String(), "abandoned after 1.2s: orders-0 stayed the primary")
	assert.NotContains(t, out.String(), "took")
}

func env(t *testing.T, objs ...client.Object) (plugin.Env, client.Client, *bytes.Buffer) {
	c := facettest.Client(t, objs...)
	out := &bytes.Buffer{}
	return plugin.Env{Client: c, Namespace: "shop", Out: out, Now: func() time.Time { return now }}, c, out
}

func annotations(t *testing.T, c client.Client) map[string]string {
	db := &dbv1.Database{}
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: "orders"}, db))
	return db.Annotations
}

// TestRequests: backup, verify-backup and rotate-ca set their annotation
// to a new token (twice in one second is refused: the controllers would
// run it once); allow-restore lists the namespaces.
func TestRequests(t *testing.T) {
	ctx := context.Background()
	e, c, out := env(t, replicated())
	for cmd, annotation := range map[string]string{
		"backup": dbv1.AnnotationBackupNow, "verify-backup": dbv1.AnnotationBackupVerifyNow, "rotate-ca": dbv1.AnnotationRotateCA,
	} {
		require.NoError(t, plugin.Run(ctx, e, []string{cmd, "orders"}))
		assert.Equal(t, "20261206T140200Z", annotations(t, c)[annotation], cmd)
		assert.Error(t, plugin.Run(ctx, e, []string{cmd, "orders"}), "%s twice in a second", cmd)
	}
	assert.Contains(t, out.String(), "token 20261206T140200Z")

	require.NoError(t, plugin.Run(ctx, e, []string{"allow-restore", "orders", "staging", "dev,qa"}))
	assert.Equal(t, "staging,dev,qa", annotations(t, c)[dbv1.AnnotationRestoreAllowedNamespaces])

	err := plugin.Run(ctx, e, []string{"backup", "missing"})
	assert.ErrorContains(t, err, "shop/missing")
}

// TestSwitchover: only an instance below spec.replicas, and not the
// primary itself, is asked for.
func TestSwitchover(t *testing.T) {
	ctx := context.Background()
	e, c, out := env(t, replicated())
	for _, pod := range []string{"orders-3", "orders-01", "billing-0"} {
		err := plugin.Run(ctx, e, []string{"switchover", "orders", pod})
		assert.ErrorContains(t, err, "orders-0 to orders-2", pod)
	}
	require.NoError(t, plugin.Run(ctx, e, []string{"switchover", "orders", "orders-1"}))
	assert.Contains(t, out.String(), "primary already")
	assert.NotContains(t, annotations(t, c), dbv1.AnnotationSwitchoverTo)
	require.NoError(t, plugin.Run(ctx, e, []string{"switchover", "orders", "orders-2"}))
	assert.Equal(t, "orders-2", annotations(t, c)[dbv1.AnnotationSwitchoverTo])
}

// TestPsqlExec: psql --exec runs on the primary as the application's
// role, in its database, with the arguments after -- (or right after
// NAME, as before).
func TestPsqlExec(t *testing.T) {
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-credentials"},
		Data: map[string][]byte{"username": []byte("app"), "database": []byte("shopdb"), "password": []byte("pw")}}
	e, _, _ := env(t, replicated(), secret)
	var argv []string
	e.Exec = func(_ context.Context, a []string) error { argv = a; return nil }
	want := []string{"kubectl", "exec", "-it", "--namespace=shop", "orders-1", "--container=engine", "--",
		"psql", "--username=app", "--dbname=shopdb", "-c", "SELECT 1"}
	require.NoError(t, plugin.Run(ctx, e, []string{"psql", "--exec", "orders", "--", "-c", "SELECT 1"}))
	assert.Equal(t, want, argv)
	require.NoError(t, plugin.Run(ctx, e, []string{"psql", "--exec", "orders", "-c", "SELECT 1"}))
	assert.Equal(t, want, argv)

	fresh, _, _ := env(t, facettest.Database())
	fresh.Exec = e.Exec
	assert.ErrorContains(t, plugin.Run(ctx, fresh, []string{"psql", "--exec", "orders"}), "no primary yet")
	assert.ErrorContains(t, plugin.Run(ctx, fresh, []string{"psql", "orders"}), "no primary yet")
}

// TestUsage: a command line the plugin does not take is a usage error
// before any request.
func TestUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"bogus"}, {"status"}, {"switchover", "orders"}, {"allow-restore", "orders"},
		{"status", "orders", "billing"}, {"status", "orders", "--bogus"}, {"restore"}, {"report"}, {"completion"}, {"psql"}} {
		err := plugin.Check(args)
		assert.True(t, errors.Is(err, plugin.ErrUsage), "%v: %v", args, err)
	}
	assert.NoError(t, plugin.Check([]string{"help"}))
}

// TestStatusShowsTheLastEvents: status ends with the last events about the
// Database (not those of other objects), newest last.
func TestStatusShowsTheLastEvents(t *testing.T) {
	var objs []client.Object
	objs = append(objs, replicated())
	for i, reason := range []string{"Bootstrapped", "Cloning", "RoleLabelled", "SwitchoverStarted", "Demoted", "Promoted", "SwitchoverCompleted"} {
		objs = append(objs, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Namespace: "shop", Name: "orders." + reason},
			InvolvedObject: corev1.ObjectReference{Kind: "Database", Name: "orders", Namespace: "shop"},
			Reason:         reason, Type: corev1.EventTypeNormal, Message: "step " + reason,
			LastTimestamp: metav1.NewTime(now.Add(time.Duration(i-10) * time.Minute)),
		})
	}
	objs = append(objs, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: "shop", Name: "billing.x"},
		InvolvedObject: corev1.ObjectReference{Kind: "Database", Name: "billing", Namespace: "shop"},
		Reason:         "FailoverStarted", Type: corev1.EventTypeWarning, LastTimestamp: metav1.NewTime(now),
	})
	e, _, out := env(t, objs...)
	require.NoError(t, plugin.Run(context.Background(), e, []string{"status", "orders"}))
	text := out.String()
	require.Contains(t, text, "Events (the last 5)")
	events := text[strings.Index(text, "Events (the last 5)"):]
	assert.NotContains(t, events, "Cloning", "only the last five")
	assert.NotContains(t, events, "FailoverStarted", "another Database's event")
	assert.Less(t, strings.Index(events, "SwitchoverStarted"), strings.Index(events, "SwitchoverCompleted"), "newest last")
	assert.Contains(t, events, "4m0s  Normal  SwitchoverCompleted  step SwitchoverCompleted")
}
