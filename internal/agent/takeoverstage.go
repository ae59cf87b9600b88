package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// checkTakeoverTimeout bounds the run of a new binary's --check-takeover.
const checkTakeoverTimeout = 30 * time.Second

// binaryStage is where a new agent binary is received and checked before
// it replaces the running one: beside it, in its directory (the pod's
// emptyDir, writable by its user), so that the renames are atomic.
type binaryStage struct {
	// current is the running agent's binary (/dbkeeper/bin/manager).
	current string
	// run runs the check to its end (the reaper's, so that the agent as
	// PID 1 does not reap it first); nil: exec.Cmd.Run.
	run func(*exec.Cmd) error
}

func (s binaryStage) newPath() string { return s.current + ".new" }
func (s binaryStage) oldPath() string { return s.current + ".old" }

// receive writes body to newPath (mode 0755), syncs it and checks that
// its SHA-256 is sum (hex); on error nothing is left.
func (s binaryStage) receive(body io.Reader, sum string) (err error) {
	f, err := os.OpenFile(s.newPath(), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return fmt.Errorf("writing the new binary: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(s.newPath())
		}
	}()
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, h), body)
	if err == nil {
		err = f.Chmod(0o755) // whatever the umask
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing the new binary: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); !strings.EqualFold(got, sum) {
		return fmt.Errorf("the new binary's SHA-256 is %s, not %s: incomplete or altered", got, sum)
	}
	return nil
}

// check runs the new binary once with the agent's own words args (the
// flags after `agent`, the server's command after `--`) and
// --check-takeover added, in env; it must exit 0 and say it is version.
// A refusal quotes its output.
func (s binaryStage) check(ctx context.Context, prefix, args, env []string, version string) (agentapi.BuildInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, checkTakeoverTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.newPath(), checkArgs(prefix, args)...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	var info agentapi.BuildInfo
	run := s.run
	if run == nil {
		run = (*exec.Cmd).Run
	}
	if err := run(cmd); err != nil {
		return info, fmt.Errorf("the new binary's --%s failed: %w: %s", agentapi.CheckTakeoverFlag, err, lastBytes(stderr.String(), 2048))
	}
	if err := json.Unmarshal(lastLine(stdout.Bytes()), &info); err != nil {
		return info, fmt.Errorf("the new binary's --%s: reading its answer %q: %w", agentapi.CheckTakeoverFlag, lastBytes(stdout.String(), 512), err)
	}
	if info.Version != version {
		return info, fmt.Errorf("the new binary says it is version %q, not %q", info.Version, version)
	}
	return info, nil
}

// checkArgs are the words the new binary's check runs with: prefix (what
// precedes the agent's own flags in its command line, `agent` for the
// manager), --check-takeover, then args.
func checkArgs(prefix, args []string) []string {
	out := append([]string{}, prefix...)
	out = append(out, "--"+agentapi.CheckTakeoverFlag)
	return append(out, args...)
}

// lastLine is b's last non-blank line.
func lastLine(b []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return lines[len(lines)-1]
}

// lastBytes is the end of s, at most n bytes, trimmed.
func lastBytes(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

// install puts the checked binary in place: current becomes oldPath and
// newPath current, each rename atomic, the directory synced.
func (s binaryStage) install() error {
	if err := os.Rename(s.current, s.oldPath()); err != nil {
		return fmt.Errorf("installing the new binary: %w", err)
	}
	if err := os.Rename(s.newPath(), s.current); err != nil {
		if rerr := os.Rename(s.oldPath(), s.current); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return fmt.Errorf("installing the new binary: %w", err)
	}
	return syncDir(filepath.Dir(s.current))
}

// rollback puts oldPath back as current (the new binary is gone).
func (s binaryStage) rollback() error {
	if err := os.Rename(s.oldPath(), s.current); err != nil {
		return fmt.Errorf("putting the former binary back: %w", err)
	}
	return syncDir(filepath.Dir(s.current))
}

// discard removes a received binary that is not installed.
func (s binaryStage) discard() { _ = os.Remove(s.newPath()) }

// syncDir syncs directory dir, so that renames in it are on disk.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}
