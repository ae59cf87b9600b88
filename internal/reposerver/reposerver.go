// Package reposerver runs the S3 server of a Database's repository on its
// backup volume (`manager repository-server`): versitygw over a directory
// of the volume, serving the Database's certificate, so that a Database
// without spec.backup.objectStore archives and takes base backups through
// the same pgBackRest S3 path as one with it (docs/design/backup.md).
package reposerver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-logr/logr"
)

// Command is the manager's subcommand.
const Command = "repository-server"

// Bucket is the one bucket of a volume repository.
const Bucket = "dbkeeper"

// Port is where the server listens (HTTPS).
const Port = 9000

// The environment the server takes its root credentials from (versitygw's
// own variables).
const (
	EnvAccessKeyID     = "ROOT_ACCESS_KEY_ID"
	EnvSecretAccessKey = "ROOT_SECRET_ACCESS_KEY"
)

// Config is the server's settings (Main's flags).
type Config struct {
	// Binary is versitygw.
	Binary string
	// Dir is the repository's directory on the volume: the bucket's data
	// and its metadata (a sidecar directory, so any file system will do).
	Dir string
	// CertFile and KeyFile are the Database's server certificate.
	CertFile, KeyFile string
	// Addr is where the server listens (HTTPS): ":9000" in the pod.
	Addr string
	// Region is the region the server answers for.
	Region string
	// CertCheck is how often the certificate files are looked at (zero:
	// every 30 s); a renewed certificate is loaded (SIGHUP) within it.
	CertCheck time.Duration
}

// Main parses the flags and runs the server until SIGTERM.
func Main(args []string, bindFlags func(*flag.FlagSet), newLog func() logr.Logger) error {
	fs := flag.NewFlagSet(Command, flag.ContinueOnError)
	cfg := Config{}
	fs.StringVar(&cfg.Binary, "versitygw", "/versitygw", "the versitygw binary")
	fs.StringVar(&cfg.Dir, "dir", "/backup/repository", "the repository's directory on the backup volume")
	fs.StringVar(&cfg.CertFile, "cert", "/etc/dbkeeper/tls/tls.crt", "the server certificate")
	fs.StringVar(&cfg.KeyFile, "key", "/etc/dbkeeper/tls/tls.key", "the server certificate's key")
	fs.StringVar(&cfg.Addr, "listen", fmt.Sprintf(":%d", Port), "where the server listens (HTTPS)")
	fs.StringVar(&cfg.Region, "region", "us-east-1", "the region the server answers for")
	if bindFlags != nil {
		bindFlags(fs)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	return Run(ctx, cfg, newLog())
}

// Args are versitygw's arguments for cfg.
func Args(cfg Config) []string {
	return []string{"--port", cfg.Addr, "--cert", cfg.CertFile, "--key", cfg.KeyFile, "--region", cfg.Region,
		"posix", "--sidecar", filepath.Join(cfg.Dir, "meta"), filepath.Join(cfg.Dir, "data")}
}

// Run makes the bucket's directory, runs versitygw until ctx ends (then
// stops it with SIGTERM) or it exits, and makes it load a renewed
// certificate (SIGHUP) when the files change.
func Run(ctx context.Context, cfg Config, log logr.Logger) error {
	if os.Getenv(EnvAccessKeyID) == "" || os.Getenv(EnvSecretAccessKey) == "" {
		return fmt.Errorf("%s: $%s and $%s must hold the repository's credentials", Command, EnvAccessKeyID, EnvSecretAccessKey)
	}
	for _, d := range []string{filepath.Join(cfg.Dir, "data", Bucket), filepath.Join(cfg.Dir, "meta")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("%s: making %s: %w", Command, d, err)
		}
	}
	cmd := exec.Command(cfg.Binary, Args(cfg)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: starting %s: %w", Command, cfg.Binary, err)
	}
	log.Info("Serving the repository", "dir", cfg.Dir, "listen", cfg.Addr, "pid", cmd.Process.Pid)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	cert := certSum(cfg)
	every := cfg.CertCheck
	if every <= 0 {
		every = 30 * time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			if err == nil {
				err = errors.New("exit status 0")
			}
			return fmt.Errorf("%s: versitygw exited: %w", Command, err)
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
			log.Info("Stopped")
			return nil
		case <-tick.C:
			if now := certSum(cfg); now != nil && !bytes.Equal(now, cert) {
				log.Info("The certificate changed: reloading it")
				if err := cmd.Process.Signal(syscall.SIGHUP); err == nil {
					cert = now
				}
			}
		}
	}
}

// certSum is a hash of the certificate and key files; nil when either
// cannot be read (a Secret volume between two versions).
func certSum(cfg Config) []byte {
	h := sha256.New()
	for _, f := range []string{cfg.CertFile, cfg.KeyFile} {
		b, err := os.ReadFile(f)
		if err != nil || len(b) == 0 {
			return nil
		}
		h.Write(b)
	}
	return h.Sum(nil)
}
