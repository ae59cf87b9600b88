package agent

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// pgbackrest runs pgbackrest with the configuration conf and args, within
// timeout, and returns its output; an error carries pgBackRest's own
// message.
func (a *Agent) pgbackrest(ctx context.Context, conf string, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := a.run(ctx, "pgbackrest", append([]string{"--config=" + conf, "--stanza=" + agentapi.Stanza}, args...), nil)
	if err != nil {
		return out, fmt.Errorf("pgbackrest %s: %s", args[0], pgbackrestError(out, err))
	}
	return out, nil
}

// pgbackrestError is what pgBackRest's output says failed: its ERROR line
// with the causes on the indented lines after it ("ERROR: [103]: unable
// to find a valid repository: repo1: [FileReadError] ... timeout after
// 10000ms waiting for read from ..."), and the store's own error code
// from a response body ("<Code>NoSuchBucket</Code>"); else err.
func pgbackrestError(out string, err error) string {
	if msg := lastErrorIn(out); msg != "" {
		if _, rest, ok := strings.Cut(out, "<Code>"); ok {
			if code, _, ok := strings.Cut(rest, "</Code>"); ok && !strings.Contains(msg, code) {
				msg += " " + code
			}
		}
		return msg
	}
	if s := strings.TrimSpace(out); s != "" {
		return errorLine(s)
	}
	return err.Error()
}

// lastErrorIn is the last ERROR of pgBackRest's output or log, without
// its timestamp and process prefix, joined with the causes on the
// indented lines that follow it (not its HINTs); empty without one.
func lastErrorIn(out string) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		j := strings.Index(lines[i], "ERROR:")
		if j < 0 {
			continue
		}
		parts := []string{strings.TrimSpace(lines[i][j:])}
		for _, l := range lines[i+1:] {
			t := strings.TrimSpace(l)
			if t == "" || t == l || strings.HasPrefix(t, "HINT:") || len(parts) == 4 {
				break
			}
			parts = append(parts, t)
		}
		return strings.Join(parts, " ")
	}
	return ""
}

// lastError is the last ERROR of a file of pgBackRest's output, with its
// causes (lastErrorIn); empty when there is none.
func lastError(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return lastErrorIn(string(b))
}
