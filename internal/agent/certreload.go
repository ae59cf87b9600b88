package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// certPollInterval is how often the agent looks at the mounted TLS files.
const certPollInterval = 10 * time.Second

// watchCerts sends SIGHUP to the running server whenever the files of the
// TLS directory change (the certificate is renewed in place in its mounted
// Secret), so that it loads the new certificate without a restart. It
// returns when ctx ends; it does nothing without a TLS directory.
func (a *Agent) watchCerts(ctx context.Context) {
	if a.cfg.TLSDir == "" {
		return
	}
	last := tlsStamp(a.cfg.TLSDir)
	tick := time.NewTicker(certPollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		stamp := tlsStamp(a.cfg.TLSDir)
		if stamp == last {
			continue
		}
		last = stamp
		a.mu.Lock()
		srv := a.srv
		a.mu.Unlock()
		// before the entrypoint execs the server, srv is a shell that a
		// SIGHUP would end.
		if srv == nil || postmasterPID(a.cfg.PGData) != srv.cmd.Process.Pid {
			continue
		}
		a.log.Info("The TLS files changed: reloading the server", "dir", a.cfg.TLSDir)
		if err := srv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			a.log.Error(err, "Cannot reload the server")
		}
	}
}

// tlsStamp identifies the current contents of the TLS directory's files.
func tlsStamp(dir string) string {
	stamp := ""
	for _, name := range []string{"tls.crt", "tls.key", "ca.crt"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err == nil {
			stamp += fmt.Sprintf("%s:%d:%d;", name, fi.ModTime().UnixNano(), fi.Size())
		}
	}
	return stamp
}
