package agent

import (
	"sync/atomic"

	"github.com/go-logr/logr"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// executableSum is the hex SHA-256 of the agent's executable once
// readExecutableSum read it, "" before: /status reports it
// (agentapi.BuildInfo.SHA256), so that the manager tells two builds of
// one version apart.
var executableSum atomic.Value

// readExecutableSum reads the agent's executable (tens of MB, a fraction
// of a second, in the background from the start) for executableSum.
func readExecutableSum(log logr.Logger) {
	sum, _, err := agentapi.FileSHA256("/proc/self/exe")
	if err != nil {
		log.Error(err, "Reading the agent's executable for its build's sum")
		return
	}
	executableSum.Store(sum)
}

// buildSum is executableSum, "" until it was read.
func buildSum() string {
	s, _ := executableSum.Load().(string)
	return s
}
