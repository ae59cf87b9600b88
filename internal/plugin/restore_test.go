package plugin_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/plugin"
)

// parseDatabase reads a restore manifest back into a Database, strictly:
// every field it prints is one of the Database's.
func parseDatabase(t *testing.T, manifest []byte) *dbv1.Database {
	t.Helper()
	db := &dbv1.Database{}
	require.NoError(t, yaml.UnmarshalStrict(manifest, db))
	return db
}

// withObjectStore is replicated() archiving to an object store, with
// more of a spec for the new Database to take.
func withObjectStore() *dbv1.Database {
	db := replicated()
	db.Spec.Image = "mirror.example/postgres:17.6-1"
	db.Spec.Storage.Size = ptr.To(resource.MustParse("50Gi"))
	db.Spec.Backup.ObjectStore = &dbv1.ObjectStoreSpec{Endpoint: "s3.example", Bucket: "backups", Path: "/dbkeeper",
		CredentialsSecret: "backup-store", CASecret: "backup-store-ca"}
	db.Spec.Backup.RecoveryWindow = "14d"
	db.Spec.TLS = &dbv1.TLSSpec{IssuerRef: &dbv1.IssuerReference{Name: "shop-issuer", Kind: "Issuer"}}
	db.Annotations = map[string]string{dbv1.AnnotationRestoreAllowedNamespaces: "qa"}
	return db
}

// TestRestoreGolden: restore prints (applies nothing) a Database
// recovering NAME's archive at the target, in another namespace: the
// source's engine, version, image, replicas, storage and object store
// (another path of it), recovery.namespace set, the Issuer of the
// source's namespace left behind; the comments say the window, the
// consent command (the annotation's namespaces kept) and the Secrets the
// new namespace needs.
func TestRestoreGolden(t *testing.T) {
	ctx := context.Background()
	e, c, out := env(t, withObjectStore())
	require.NoError(t, plugin.Run(ctx, e, []string{"restore", "orders", "--to", "orders-staging", "--to-namespace", "staging",
		"--target-time", "2026-12-06T14:01:00+01:00"}))
	golden(t, "restore.golden.yaml", out.Bytes())
	assert.Equal(t, map[string]string{dbv1.AnnotationRestoreAllowedNamespaces: "qa"}, annotations(t, c), "nothing is written")

	db := parseDatabase(t, out.Bytes())
	assert.Equal(t, "Database", db.Kind)
	assert.Equal(t, "database.dbkeeper.io/v1", db.APIVersion)
	assert.Equal(t, "staging", db.Namespace)
	assert.Equal(t, "orders-staging", db.Name)
	assert.Equal(t, dbv1.EnginePostgres, db.Spec.Engine)
	assert.Equal(t, "17", db.Spec.Version)
	assert.Equal(t, "mirror.example/postgres:17.6-1", db.Spec.Image)
	assert.EqualValues(t, 3, *db.Spec.Replicas)
	assert.Equal(t, "50Gi", db.Spec.Storage.Size.String())
	require.NotNil(t, db.Spec.Bootstrap)
	rec := db.Spec.Bootstrap.Recovery
	require.NotNil(t, rec)
	assert.Nil(t, db.Spec.Bootstrap.FromBackup)
	assert.Equal(t, "orders", rec.Database)
	assert.Equal(t, "shop", rec.Namespace)
	assert.Nil(t, rec.ObjectStore)
	assert.Equal(t, &dbv1.RecoveryTarget{Time: "2026-12-06T13:01:00Z"}, rec.Target)
	assert.Equal(t, "backups", db.Spec.Backup.ObjectStore.Bucket)
	assert.Equal(t, "14d", db.Spec.Backup.RecoveryWindow)
	assert.Nil(t, db.Spec.TLS, "the Issuer of namespace shop stays behind; TLS is the default")
	assert.Empty(t, db.Status)

	text := out.String()
	assert.Contains(t, text, "# Recoverable window of shop/orders: 2026-12-05T12:02:00Z to 2026-12-06T14:01:20Z")
	assert.Contains(t, text, "kubectl dbkeeper -n shop allow-restore orders qa,staging")
	assert.Contains(t, text, "backup-store, backup-store-ca")
}

// TestRestoreSameNamespace: in the source's namespace, recovery names no
// namespace, a Database on the backup volume's repository can be the
// source, the LSN target is taken as is, and consent is asked for too
// (being in one namespace is no consent); once given, not.
func TestRestoreSameNamespace(t *testing.T) {
	ctx := context.Background()
	e, _, out := env(t, replicated())
	require.NoError(t, plugin.Run(ctx, e, []string{"restore", "orders", "--to=orders-before", "--target-lsn", "0/5000060"}))
	db := parseDatabase(t, out.Bytes())
	assert.Equal(t, "shop", db.Namespace)
	assert.Empty(t, db.Spec.Bootstrap.Recovery.Namespace)
	assert.Equal(t, &dbv1.RecoveryTarget{LSN: "0/5000060"}, db.Spec.Bootstrap.Recovery.Target)
	assert.Nil(t, db.Spec.Backup.ObjectStore)
	assert.Contains(t, out.String(), "kubectl dbkeeper -n shop allow-restore orders shop")

	// no target: the archive's end
	out.Reset()
	require.NoError(t, plugin.Run(ctx, e, []string{"allow-restore", "orders", "shop"}))
	out.Reset()
	require.NoError(t, plugin.Run(ctx, e, []string{"restore", "orders", "--to", "orders-copy"}))
	db = parseDatabase(t, out.Bytes())
	assert.Nil(t, db.Spec.Bootstrap.Recovery.Target)
	assert.Contains(t, out.String(), "up to the archive's end")
	assert.NotContains(t, out.String(), "allow-restore")
}

// TestRestoreRefusals: a target outside the recoverable window the
// status shows, a malformed target, two targets, no --to, a name the CRD
// refuses, the source itself, and a volume repository's source from
// another namespace are refused before anything is printed; a time after
// the last archived segment is printed with a warning.
func TestRestoreRefusals(t *testing.T) {
	ctx := context.Background()
	e, _, out := env(t, replicated())
	for _, tc := range []struct {
		args  []string
		usage bool
		msg   string
	}{
		{[]string{"--to", "x", "--target-time", "2026-12-05T12:01:59Z"}, false, "before the recoverable window of Database shop/orders, which begins at 2026-12-05T12:02:00Z"},
		{[]string{"--to", "x", "--target-time", "2026-12-07T00:00:00Z"}, false, "in the future"},
		{[]string{"--to", "x", "--target-time", "yesterday"}, true, "RFC 3339"},
		{[]string{"--to", "x", "--target-lsn", "5000060"}, true, "no WAL position"},
		{[]string{"--to", "x", "--target-lsn", "0/1", "--target-time", "2026-12-06T00:00:00Z"}, true, "not both"},
		{nil, true, "--to NEWNAME"},
		{[]string{"--to", "Orders_2"}, true, "no Database name"},
		{[]string{"--to", "orders"}, false, "cannot recover into itself"},
		{[]string{"--to", "orders", "--to-namespace", "staging"}, false, "keeps its archive on its backup volume"},
	} {
		out.Reset()
		err := plugin.Run(ctx, e, append([]string{"restore", "orders"}, tc.args...))
		require.Error(t, err, "%v", tc.args)
		assert.Contains(t, err.Error(), tc.msg, "%v", tc.args)
		assert.Equal(t, tc.usage, errors.Is(err, plugin.ErrUsage), "%v: %v", tc.args, err)
		assert.Empty(t, out.String())
	}

	out.Reset()
	require.NoError(t, plugin.Run(ctx, e, []string{"restore", "orders", "--to", "x", "--target-time", "2026-12-06T14:01:50Z"}))
	assert.Contains(t, out.String(), "# The target is after the last WAL segment archived (000000020000000000000004 at 2026-12-06T14:01:20Z)")

	// without a repository there is nothing to recover from
	fresh, _, _ := env(t, facettest.Database())
	err := plugin.Run(ctx, fresh, []string{"restore", "orders", "--to", "x"})
	assert.ErrorContains(t, err, "no archive to recover from")
}

// TestRestoreManifestIsClean: no status, no creationTimestamp: what
// kubectl apply takes without noise.
func TestRestoreManifestIsClean(t *testing.T) {
	var out bytes.Buffer
	e, _, _ := env(t, withObjectStore())
	e.Out = &out
	require.NoError(t, plugin.Run(context.Background(), e, []string{"restore", "orders", "--to", "copy", "--to-namespace", "qa"}))
	assert.NotContains(t, out.String(), "status:")
	assert.NotContains(t, out.String(), "creationTimestamp")
	assert.False(t, strings.Contains(out.String(), "allow-restore"), "qa is allowed already")
}
