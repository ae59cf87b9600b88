package agentapi

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A build's version is its module's, with the VCS revision when stamped.
func TestVersionOf(t *testing.T) {
	assert.Equal(t, "v1.2.3", versionOf(&debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}))
	bi := &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}
	assert.Equal(t, "(devel)+0123456789ab-dirty", versionOf(bi))
	bi.Main.Version = "v0.0.0-2026"
	bi.Settings[1].Value = "false"
	assert.Equal(t, "v0.0.0-2026+0123456789ab", versionOf(bi))
	assert.NotEmpty(t, Version())
}
