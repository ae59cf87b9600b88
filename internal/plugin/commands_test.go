package plugin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/plugin"
)

// golden compares got with testdata/name (rewritten with -update).
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./internal/plugin -update")
	assert.Equal(t, string(want), string(got))
}

// TestStatusJSON: status -o json is what status shows, as the API spells
// it, with the summary's facts computed once for programs (ready, the
// primary, the recoverable window); a fresh Database has empty lists,
// not nulls.
func TestStatusJSON(t *testing.T) {
	ctx := context.Background()
	e, _, out := env(t, replicated())
	require.NoError(t, plugin.Run(ctx, e, []string{"status", "orders", "-o", "json"}))
	golden(t, "status.golden.json", out.Bytes())

	var got plugin.StatusReport
	require.NoError(t, json.Unmarshal(out.Bytes(), &got))
	assert.True(t, got.Ready)
	assert.Equal(t, "orders-1", got.Primary)
	assert.EqualValues(t, 3, got.ReadyInstances)
	assert.Len(t, got.Replication.Instances, 3)
	require.NotNil(t, got.RecoverableWindow)
	assert.Equal(t, "2026-12-05T12:02:00Z", got.RecoverableWindow.From.UTC().Format("2006-01-02T15:04:05Z07:00"))
	assert.Equal(t, "2026-12-06T14:01:20Z", got.RecoverableWindow.To.UTC().Format("2006-01-02T15:04:05Z07:00"))

	// every spelling kubectl users type
	for _, args := range [][]string{{"status", "orders", "-ojson"}, {"status", "--output=json", "orders"}, {"status", "-o=json", "orders"}} {
		out.Reset()
		require.NoError(t, plugin.Run(ctx, e, args), "%v", args)
		golden(t, "status.golden.json", out.Bytes())
	}
	out.Reset()
	require.NoError(t, plugin.Run(ctx, e, []string{"status", "orders", "-o", "text"}))
	assert.Contains(t, out.String(), "Database shop/orders: postgres 17, 3 of 3 instances ready, Ready")
	assert.True(t, errors.Is(plugin.Run(ctx, e, []string{"status", "orders", "-o", "yaml"}), plugin.ErrUsage))

	fresh, _, out := env(t, facettest.Database())
	require.NoError(t, plugin.Run(ctx, fresh, []string{"status", "orders", "-o", "json"}))
	assert.Contains(t, out.String(), `"conditions": []`)
	assert.Contains(t, out.String(), `"ready": false`)
}

// TestParseGlobals: -n, --kubeconfig and --context go before or after
// the command, in kubectl's spellings; for psql, not after NAME (psql's
// own -n is --no-readline); a flag before the command that is no global
// one is a usage error.
func TestParseGlobals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want plugin.Globals
		rest []string
	}{
		{[]string{"status", "orders", "-n", "prod"}, plugin.Globals{Namespace: "prod"}, []string{"status", "orders"}},
		{[]string{"-nprod", "status", "orders", "-o", "json"}, plugin.Globals{Namespace: "prod"}, []string{"status", "orders", "-o", "json"}},
		{[]string{"--namespace=prod", "--kubeconfig", "/k", "backup", "orders", "--context=c"},
			plugin.Globals{Namespace: "prod", Kubeconfig: "/k", Context: "c"}, []string{"backup", "orders"}},
		{[]string{"-namespace", "prod", "backup", "orders"}, plugin.Globals{Namespace: "prod"}, []string{"backup", "orders"}},
		{[]string{"psql", "-n", "prod", "orders", "-n", "-c", "SELECT 1"}, plugin.Globals{Namespace: "prod"},
			[]string{"psql", "orders", "-n", "-c", "SELECT 1"}},
		{[]string{"psql", "orders", "--", "-n"}, plugin.Globals{}, []string{"psql", "orders", "--", "-n"}},
		{[]string{"status", "--help"}, plugin.Globals{Help: true}, []string{"status"}},
	} {
		g, rest, err := plugin.ParseGlobals(tc.args)
		require.NoError(t, err, "%v", tc.args)
		assert.Equal(t, tc.want, g, "%v", tc.args)
		assert.Equal(t, tc.rest, rest, "%v", tc.args)
	}
	for _, args := range [][]string{{"-o", "json", "status", "orders"}, {"status", "orders", "-n"}} {
		_, _, err := plugin.ParseGlobals(args)
		assert.True(t, errors.Is(err, plugin.ErrUsage), "%v: %v", args, err)
	}
}

// TestCompletionScripts: completion bash|zsh prints a script that asks
// kubectl-dbkeeper __complete; another shell is a usage error.
func TestCompletionScripts(t *testing.T) {
	var out bytes.Buffer
	e := plugin.Env{Out: &out}
	require.NoError(t, plugin.Run(context.Background(), e, []string{"completion", "bash"}))
	assert.Contains(t, out.String(), "complete -F _kubectl_dbkeeper kubectl-dbkeeper")
	assert.Contains(t, out.String(), "__complete")
	out.Reset()
	require.NoError(t, plugin.Run(context.Background(), e, []string{"completion", "zsh"}))
	assert.Contains(t, out.String(), "#compdef kubectl-dbkeeper")
	assert.Contains(t, out.String(), "compdef _kubectl_dbkeeper kubectl-dbkeeper")
	assert.True(t, errors.Is(plugin.Run(context.Background(), e, []string{"completion", "fish"}), plugin.ErrUsage))
	assert.True(t, plugin.Offline([]string{"completion", "bash"}))
	assert.False(t, plugin.Offline([]string{"status", "orders"}))
}
