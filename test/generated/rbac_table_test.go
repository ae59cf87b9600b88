package generated_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
)

// TestRBACTableIsTheClusterRole (issue 29): docs/operations/rbac.md's table
// of what the manager may do names
// exactly the rules of the ClusterRole controller-gen generates
// (config/rbac/role.yaml): every API group, resource and verb granted has
// a row that says why, and no row names a permission that is not granted.
// Before, rules the ClusterRole grants were missing from it.
func TestRBACTableIsTheClusterRole(t *testing.T) {
	root, err := envtest.RepoRoot()
	require.NoError(t, err)
	raw, err := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml"))
	require.NoError(t, err)
	var role rbacv1.ClusterRole
	require.NoError(t, yaml.Unmarshal(raw, &role))
	granted := map[string]bool{}
	for _, r := range role.Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					granted[g+"|"+res+"|"+v] = true
				}
			}
		}
	}
	require.NotEmpty(t, granted)

	doc, err := os.ReadFile(filepath.Join(root, "docs", "operations", "rbac.md"))
	require.NoError(t, err)
	section := string(doc)
	code := regexp.MustCompile("`([^`]*)`")
	words := regexp.MustCompile(`[a-z]+`)
	described := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 5 || !strings.Contains(cells[1], "`") {
			continue // not a row of the table
		}
		var groups, resources []string
		for _, m := range code.FindAllStringSubmatch(cells[1], -1) {
			groups = append(groups, strings.Trim(m[1], `"`))
		}
		for _, m := range code.FindAllStringSubmatch(cells[2], -1) {
			resources = append(resources, m[1])
		}
		verbs, _, _ := strings.Cut(cells[3], "(") // "(the same rule)" is a remark
		for _, g := range groups {
			for _, res := range resources {
				for _, v := range words.FindAllString(verbs, -1) {
					described[g+"|"+res+"|"+v] = true
				}
			}
		}
	}
	var missing, extra []string
	for k := range granted {
		if !described[k] {
			missing = append(missing, k)
		}
	}
	for k := range described {
		if !granted[k] {
			extra = append(extra, k)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	assert.Empty(t, missing, "granted by config/rbac/role.yaml, not in docs/operations/rbac.md's table (group|resource|verb)")
	assert.Empty(t, extra, "in docs/operations/rbac.md's table, not granted by config/rbac/role.yaml (group|resource|verb)")
}
