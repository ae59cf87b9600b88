package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

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
	return c.start(name, filepath.Join(c.Bin, name), args...)
}

// start starts the program path as the component name, with its output in
// <Dir>/<name>.log; it dies with this process (Pdeathsig), and on a real
// node the journal records its pid.
func (c *Cluster) start(name, path string, args ...string) error {
	logFile, err := os.Create(filepath.Join(c.Dir, name+".log"))
	if err != nil {
		return fmt.Errorf("creating the log of %s: %w", name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = framework.SysProcAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	if c.journal != nil {
		if err := c.journal.recordPid(name, cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			logFile.Close()
			return err
		}
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	c.procs = append(c.procs, p)
	return nil
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
