package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// checkTakeover is `manager agent --check-takeover`, run by the agent
// that received this binary before it switches to it: the flags and
// environment parsed (ParseFlags), it checks that the data directory
// holds a cluster it can read, and writes this build's BuildInfo to out
// as one JSON line.
func checkTakeover(cfg Config, out io.Writer) error {
	b, err := os.ReadFile(filepath.Join(cfg.PGData, versionFile))
	if err != nil {
		return fmt.Errorf("checking the takeover: reading the data directory: %w", err)
	}
	if len(b) == 0 {
		return fmt.Errorf("checking the takeover: %s holds no cluster", cfg.PGData)
	}
	if _, err := os.Stat(filepath.Join(cfg.PGData, "global", "pg_control")); err != nil {
		return fmt.Errorf("checking the takeover: reading the data directory: %w", err)
	}
	if err := json.NewEncoder(out).Encode(agentapi.BuildInfo{Version: agentapi.Version(), Level: agentapi.Level}); err != nil {
		return fmt.Errorf("checking the takeover: %w", err)
	}
	return nil
}
