package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dbkeeper/dbkeeper/test/framework"
)

// process is a component the cluster started.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// run starts one component of Bin with its output in <Dir>/<name>.log.
func (c *Cluster) run(name string, args ...string) error {
	_, err := c.StartProcess(name, filepath.Join(c.Bin, name), args...)
	return err
}

// StartProcess starts the program path as the component name, with its
// output in <Dir>/<name>.log (Log), and returns its pid. It dies with
// this process (Pdeathsig); Stop stops it, and Start and Poll fail when it
// exits.
func (c *Cluster) StartProcess(name, path string, args ...string) (int, error) {
	logFile, err := os.Create(filepath.Join(c.Dir, name+".log"))
	if err != nil {
		return 0, fmt.Errorf("creating the log of %s: %w", name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = framework.SysProcAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return 0, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	c.procs = append(c.procs, p)
	return cmd.Process.Pid, nil
}

// StopProcess stops the component name (SIGTERM, SIGKILL after 10 s) and
// waits for it; it reports whether the cluster started one.
func (c *Cluster) StopProcess(name string) bool {
	found := false
	for _, p := range c.procs {
		if p.name == name {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			p.wait()
			found = true
		}
	}
	return found
}

// stopProcesses stops every component.
func (c *Cluster) stopProcesses() {
	for _, p := range c.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range c.procs {
		p.wait()
	}
	c.procs = nil
}

// wait waits for a signalled process, killing it after 10 s.
func (p *process) wait() {
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// exited returns an error naming the first component that exited.
func (c *Cluster) exited() error {
	for _, p := range c.procs {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited: %v (log: %s)\n%s", p.name, p.err, filepath.Join(c.Dir, p.name+".log"), tail(c.Log(p.name), 15))
		default:
		}
	}
	return nil
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
