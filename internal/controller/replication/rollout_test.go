package replication

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/utils/ptr"

	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// TestOutdatedByRestartHash (docs/design/upgrades.md, part 1): while the
// agents take over in place, a pod whose restart hash is the template's
// is current whatever its revision (the agent image alone changed), one
// of another hash is outdated; a pod made before the hash, or the
// takeover off, goes by its revision as before.
func TestOutdatedByRestartHash(t *testing.T) {
	db := facettest.Database()
	db.Spec.Replicas = ptr.To[int32](4)
	insts := []Instance{
		{Name: "orders-0", Ordinal: 0, Exists: true, Revision: "r1", RestartHash: "h1"}, // the agent image changed
		{Name: "orders-1", Ordinal: 1, Exists: true, Revision: "r1", RestartHash: "h0"}, // what the kubelet runs changed
		{Name: "orders-2", Ordinal: 2, Exists: true, Revision: "r1"},                    // made before the hash
		{Name: "orders-3", Ordinal: 3, Exists: true, Revision: "r2", RestartHash: "h1"}, // made from the template
	}
	names := func(in Input) []string {
		var out []string
		for _, inst := range outdated(in) {
			out = append(out, inst.Name)
		}
		return out
	}
	build := &instance.AgentBinary{Version: "v2"}
	in := Input{DB: db, Instances: insts, UpdateRevision: "r2", RestartHash: "h1", AgentBuild: build}
	assert.Equal(t, []string{"orders-2", "orders-1"}, names(in))
	in.AgentBuild = nil
	assert.Equal(t, []string{"orders-2", "orders-1", "orders-0"}, names(in), "by revision alone")
	in.AgentBuild, in.RestartHash = build, ""
	assert.Equal(t, []string{"orders-2", "orders-1", "orders-0"}, names(in), "a template without the hash: by revision")
	in.UpdateRevision = ""
	assert.Empty(t, names(in), "no update revision: none")
	assert.True(t, Input{AgentBuild: build, RestartHash: "h1", UpdateRevision: "r2"}.runsTemplate(&insts[0]))
}
