package plugin_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/dbkeeper/dbkeeper/internal/plugin"
)

// fakeKubectl answers kubectl get ... -o name as a cluster with the
// Databases orders and billing, their pods and two namespaces would, and
// records each call.
func fakeKubectl(calls *[][]string) func(context.Context, []string) ([]byte, error) {
	return func(_ context.Context, args []string) ([]byte, error) {
		*calls = append(*calls, args)
		switch args[1] {
		case "databases.database.dbkeeper.io":
			return []byte("database.database.dbkeeper.io/orders\ndatabase.database.dbkeeper.io/billing\n"), nil
		case "pods":
			return []byte("pod/orders-0\npod/orders-1\n"), nil
		case "namespaces":
			return []byte("namespace/shop\nnamespace/staging\n"), nil
		}
		return nil, nil
	}
}

// TestComplete: kubectl_complete-dbkeeper (and __complete) completes the
// commands, Database names of the words' namespace, a switchover's pods,
// namespaces, flags and their values; after psql's NAME the shell's own
// file completion takes over.
func TestComplete(t *testing.T) {
	ctx := context.Background()
	var calls [][]string
	k := fakeKubectl(&calls)
	lines := func(args ...string) []string {
		return strings.Split(strings.TrimSuffix(plugin.Complete(ctx, k, args), "\n"), "\n")
	}

	got := lines("")
	assert.Contains(t, got, "status\tconditions, instances, backups, TLS")
	assert.Contains(t, got, "restore\tprint a Database recovering this one's backups")
	assert.Equal(t, ":4", got[len(got)-1])
	assert.Equal(t, []string{"report\twrite a support bundle", "restore\tprint a Database recovering this one's backups", "rotate-ca\trotate the Database's CA", ":4"}, lines("r"))

	calls = nil
	assert.Equal(t, []string{"orders", ":4"}, lines("-n", "shop", "status", "o"))
	assert.Equal(t, [][]string{{"get", "databases.database.dbkeeper.io", "-o", "name", "--request-timeout=5s", "--namespace=shop"}}, calls)
	calls = nil
	assert.Equal(t, []string{"orders", "billing", ":4"}, lines("--context=prod", "backup", ""))
	assert.Equal(t, []string{"get", "databases.database.dbkeeper.io", "-o", "name", "--request-timeout=5s", "--context=prod"}, calls[0])

	calls = nil
	assert.Equal(t, []string{"orders-0", "orders-1", ":4"}, lines("switchover", "orders", ""))
	assert.Contains(t, calls[0], "--selector=app.kubernetes.io/instance=orders,app.kubernetes.io/component=database")
	assert.Equal(t, []string{"shop", "staging", "*", ":4"}, lines("allow-restore", "orders", ""))
	assert.Equal(t, []string{"staging", ":4"}, lines("restore", "orders", "--to-namespace", "st"))
	assert.Equal(t, []string{"shop", ":4"}, lines("-n", "sh"))

	assert.Equal(t, []string{"json", ":4"}, lines("status", "orders", "-o", "j"))
	assert.Equal(t, []string{":0"}, lines("report", "orders", "-o", ""), "a file name")
	assert.Equal(t, []string{"--to", "--to-namespace", "--target-time", "--target-lsn", ":4"}, lines("restore", "orders", "--t"))
	assert.Equal(t, []string{":4"}, lines("restore", "orders", "--target-time", ""))
	assert.Equal(t, []string{"bash", "zsh", ":4"}, lines("completion", ""))
	assert.Equal(t, []string{":0"}, lines("psql", "orders", ""), "psql's own arguments")
	assert.Equal(t, []string{":0"}, lines("psql", "orders", "--", "-c"))
	assert.Equal(t, []string{"orders", ":4"}, lines("psql", "--exec", "or"))

	// without kubectl (or a cluster): no names, still an answer
	assert.Equal(t, ":4\n", plugin.Complete(ctx, nil, []string{"status", ""}))
}
