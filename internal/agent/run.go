package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
)

// run runs a program of the server's and returns its output; a failure
// carries the line that says why.
func (a *Agent) run(ctx context.Context, name string, args []string, stdin io.Reader) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Stdin = stdin
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if err := a.reaper.start(cmd); err != nil {
		return "", fmt.Errorf("running %s: %w", name, err)
	}
	if err := a.reaper.wait(cmd); err != nil {
		return out.String(), fmt.Errorf("%s: %w: %s", name, err, errorLine(out.String()))
	}
	return out.String(), nil
}
