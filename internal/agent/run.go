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
	return a.runWith(ctx, "", append(os.Environ(), "LC_ALL=C"), stdin, name, args...)
}

// runIn is run in directory dir with environment env.
func (a *Agent) runIn(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	return a.runWith(ctx, dir, env, nil, name, args...)
}

func (a *Agent) runWith(ctx context.Context, dir string, env []string, stdin io.Reader, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Stdin = stdin
	cmd.Dir, cmd.Env = dir, env
	if err := a.reaper.start(cmd); err != nil {
		return "", fmt.Errorf("running %s: %w", name, err)
	}
	if err := a.reaper.wait(cmd); err != nil {
		return out.String(), fmt.Errorf("%s: %w: %s", name, err, errorLine(out.String()))
	}
	return out.String(), nil
}
