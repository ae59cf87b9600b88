package agent

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/pki"
)

// Every instance with TLS and a repository runs pgBackRest's TLS server
// (`pgbackrest server`, its remote protocol over mutual TLS): the
// primary's pgBackRest reads a standby's files through it for a base
// backup from the standby (basebackup.go). It serves the Database's
// certificate and accepts a client only with a certificate of the
// Database's CA whose common name is the one the Database's certificate
// carries: the other instances, which present that same certificate.

// backupServerStopGrace is how long a stopped TLS server has to exit
// before it is killed.
const backupServerStopGrace = 10 * time.Second

// backupServerBackoff and backupServerMaxBackoff pace the restarts of a
// TLS server that exits on its own.
const (
	backupServerBackoff    = 5 * time.Second
	backupServerMaxBackoff = time.Minute
)

// backupTLSDir holds the copies of the TLS files pgBackRest reads, its
// server's and its client's: mode 0600 and owned by the agent's user, as
// pgBackRest wants of a key, whatever the mounted Secret's mode.
func (a *Agent) backupTLSDir() string { return filepath.Join(a.runtimeDir, "tls") }

// backupServerConfigPath is the TLS server's configuration: no
// repository, no secret of the store.
func (a *Agent) backupServerConfigPath() string {
	return filepath.Join(a.runtimeDir, "pgbackrest-server.conf")
}

// runsBackupServer says whether this instance runs the TLS server.
func (a *Agent) runsBackupServer() bool {
	return a.cfg.TLSDir != "" && a.cfg.Repository != nil && a.cfg.BackupServerPort > 0
}

// copyTLSFiles copies tls.crt, tls.key and ca.crt of src into dst (0600)
// and returns the certificate.
func copyTLSFiles(src, dst string) (*x509.Certificate, error) {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return nil, fmt.Errorf("making %s: %w", dst, err)
	}
	var cert *x509.Certificate
	for _, name := range []string{"tls.crt", "tls.key", "ca.crt"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			return nil, fmt.Errorf("reading the TLS files: %w", err)
		}
		if name == "tls.crt" {
			if cert, err = pki.ParseCertificate(b); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		}
		if _, err := writeFileAtomic(filepath.Join(dst, name), b); err != nil {
			return nil, err
		}
	}
	return cert, nil
}

// backupServerAddress is the address the TLS server listens on: the
// agent's own listening host (loopback in tests), else every IPv4
// address ("*", pgBackRest's wildcard).
func (a *Agent) backupServerAddress() string {
	if host, _, err := net.SplitHostPort(a.cfg.Listen); err == nil && host != "" {
		return host
	}
	return "*"
}

// backupServerConfig is the TLS server's configuration for the TLS files
// in dir, accepting clients whose certificate's common name is cn.
func backupServerConfig(dir, logDir, address string, port int, cn string) string {
	return iniSection("global", map[string]string{
		"log-path":             logDir,
		"lock-path":            filepath.Join(logDir, "lock"),
		"log-level-console":    "off",
		"log-level-stderr":     "warn",
		"log-level-file":       "off",
		"tls-server-address":   address,
		"tls-server-port":      strconv.Itoa(port),
		"tls-server-cert-file": filepath.Join(dir, "tls.crt"),
		"tls-server-key-file":  filepath.Join(dir, "tls.key"),
		"tls-server-ca-file":   filepath.Join(dir, "ca.crt"),
		"tls-server-auth":      cn + "=" + agentapi.Stanza,
	})
}

// iniSection renders one section of a pgBackRest configuration, its keys
// sorted.
func iniSection(name string, o map[string]string) string {
	keys := make([]string, 0, len(o))
	for k := range o {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "[%s]\n", name)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, o[k])
	}
	return b.String()
}

// prepareBackupServer copies the TLS files and writes the server's
// configuration.
func (a *Agent) prepareBackupServer() error {
	cert, err := copyTLSFiles(a.cfg.TLSDir, a.backupTLSDir())
	if err != nil {
		return err
	}
	cn := cert.Subject.CommonName
	if cn == "" {
		return errors.New("the Database's certificate has no common name: the TLS server would accept no client")
	}
	conf := backupServerConfig(a.backupTLSDir(), a.runtimeDir, a.backupServerAddress(), a.cfg.BackupServerPort, cn)
	_, err = writeFileAtomic(a.backupServerConfigPath(), []byte(conf))
	return err
}

// runBackupServer runs pgBackRest's TLS server until ctx ends: started
// again (after a back-off) when it exits on its own, and restarted when
// the TLS files change (a renewed certificate). It closes done when it
// returns.
func (a *Agent) runBackupServer(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	if !a.runsBackupServer() {
		return
	}
	backoff := backupServerBackoff
	for ctx.Err() == nil {
		stamp := tlsStamp(a.cfg.TLSDir)
		if err := a.prepareBackupServer(); err != nil {
			a.log.Error(err, "Cannot start pgBackRest's TLS server: base backups are taken from the primary")
			if !a.waitTLSChange(ctx, stamp, backupServerMaxBackoff) {
				return
			}
			continue
		}
		cmd := exec.Command("pgbackrest", "--config="+a.backupServerConfigPath(), "server")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.Env = append(os.Environ(), "LC_ALL=C")
		// it dies with the agent, whatever ends it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
		if err := a.reaper.start(cmd); err != nil {
			a.log.Error(err, "Cannot start pgBackRest's TLS server")
			if !sleepCtx(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, backupServerMaxBackoff)
			continue
		}
		started := time.Now()
		a.log.Info("Started pgBackRest's TLS server", "pid", cmd.Process.Pid, "port", a.cfg.BackupServerPort)
		exited := make(chan error, 1)
		go func() { exited <- a.reaper.wait(cmd) }()
		switch why := a.superviseBackupServer(ctx, cmd, exited, stamp); why {
		case "":
			return
		case "renewed":
			a.log.Info("The TLS files changed: restarted pgBackRest's TLS server with them")
			backoff = backupServerBackoff
		default:
			if time.Since(started) > backupServerMaxBackoff {
				backoff = backupServerBackoff
			}
			a.log.Error(errors.New(why), "pgBackRest's TLS server exited: starting it again", "after", backoff)
			if !sleepCtx(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, backupServerMaxBackoff)
		}
	}
}

// superviseBackupServer waits for the server cmd: it returns "" once ctx
// ended (the server stopped), "renewed" once the TLS files changed from
// stamp (the server stopped), or why the server exited on its own.
func (a *Agent) superviseBackupServer(ctx context.Context, cmd *exec.Cmd, exited <-chan error, stamp string) string {
	tick := time.NewTicker(certPollInterval)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			return fmt.Sprintf("exit: %v", err)
		case <-ctx.Done():
			stopBackupServer(cmd, exited)
			return ""
		case <-tick.C:
			if tlsStamp(a.cfg.TLSDir) != stamp {
				stopBackupServer(cmd, exited)
				return "renewed"
			}
		}
	}
}

// stopBackupServer terminates the server and waits for it, killing it
// after backupServerStopGrace.
func stopBackupServer(cmd *exec.Cmd, exited <-chan error) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(backupServerStopGrace):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// waitTLSChange waits until the TLS files change from stamp or wait
// passed; false once ctx ended.
func (a *Agent) waitTLSChange(ctx context.Context, stamp string, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		if !sleepCtx(ctx, certPollInterval) {
			return false
		}
		if tlsStamp(a.cfg.TLSDir) != stamp {
			return true
		}
	}
	return true
}

// sleepCtx sleeps d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
