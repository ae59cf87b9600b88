package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const validNames = "statefulset, service, secret, backup, tls, replication, configuration, roles, extensions, cleanup, readiness"

// An unknown controller name stops the manager before it connects anywhere,
// with the list of the valid names.
func TestUnknownControllersAreRefused(t *testing.T) {
	for _, value := range []string{"bogus", "*,-bogus", "statefulset,nope", "*,"} {
		t.Run(value, func(t *testing.T) {
			err := run([]string{"--controllers=" + value})
			require.Error(t, err)
			assert.Contains(t, err.Error(), validNames)
		})
	}
}

// TestBinaryRefusesBadFlags: the built manager exits 1 on a bad flag value,
// naming it, before it starts anything.
func TestBinaryRefusesBadFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped under -short")
	}
	bin := filepath.Join(t.TempDir(), "manager")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	for _, tc := range []struct{ flag, says string }{
		{"--controllers=bogus", `unknown controller "bogus"`},
		{"--engine-images=postgres:13=registry.example.com/postgres:13.1", `invalid entry "postgres:13=registry.example.com/postgres:13.1" in --engine-images`},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			cmd := exec.Command(bin, tc.flag, "--kubeconfig=/nonexistent")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			require.True(t, errors.As(err, &exit), "the manager must exit non-zero, got %v", err)
			assert.Equal(t, 1, exit.ExitCode())
			assert.Contains(t, stderr.String(), tc.says)
			assert.NotContains(t, stderr.String(), "Starting dbkeeper", "refused before starting")
		})
	}
}

// A bad image catalog stops the manager before it connects anywhere, with
// the flag and the entry named; a good one gets as far as the kubeconfig.
func TestEngineImageFlags(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	tests := []struct {
		name string
		args []string
		errs []string
	}{
		{name: "unknown version", args: []string{"--engine-images=postgres:19=registry.example.com/postgres:19.0"},
			errs: []string{`invalid entry "postgres:19=registry.example.com/postgres:19.0" in --engine-images`, "14, 15, 16, 17, 18"}},
		{name: "unknown engine", args: []string{"--engine-images=mysql:8=registry.example.com/mysql:8.4"},
			errs: []string{`invalid entry "mysql:8=registry.example.com/mysql:8.4" in --engine-images`, `unknown engine "mysql"`}},
		{name: "malformed image", args: []string{"--engine-images=postgres:15=Registry/Postgres:15"},
			errs: []string{`invalid entry "postgres:15=Registry/Postgres:15" in --engine-images`, "not a valid image reference"}},
		{name: "empty image", args: []string{"--engine-images=postgres:15="},
			errs: []string{`invalid entry "postgres:15=" in --engine-images`}},
		{name: "duplicate across repeated flags", args: []string{
			"--engine-images=postgres:15=a.example.com/postgres:15", "--engine-images=postgres:15=b.example.com/postgres:15"},
			errs: []string{"duplicate entry for postgres:15 in --engine-images"}},
		{name: "bad registry", args: []string{"--engine-registry=https://mirror.example.com"},
			errs: []string{`invalid --engine-registry "https://mirror.example.com"`}},
		{name: "good catalog", args: []string{"--engine-registry=mirror.example.com/dockerhub",
			"--engine-images=postgres:15=localhost/dbkeeper/postgres:15,postgres:17=registry.example.com/pg:17.6@sha256:" + strings.Repeat("ab", 32)},
			errs: []string{"loading kubeconfig"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(append(tt.args, "--kubeconfig=/nonexistent", "--zap-log-level=error", "--agent-image=ghcr.io/dbkeeper/dbkeeper:test"))
			require.Error(t, err)
			for _, want := range tt.errs {
				assert.Contains(t, err.Error(), want)
			}
		})
	}
}

// --metrics-cert-dir is refused where controller-runtime would ignore it
// (without --metrics-secure) or quietly fall back to a self-signed
// certificate (tls.crt or tls.key missing); a complete one, and
// --metrics-secure alone, get as far as the kubeconfig. So do an
// --instance-metrics-interval of 0 (off) or of a second or more; a
// shorter or negative one is refused.
func TestMetricsFlags(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	certs := t.TempDir()
	onlyCert := t.TempDir()
	for dir, names := range map[string][]string{certs: {"tls.crt", "tls.key"}, onlyCert: {"tls.crt"}} {
		for _, name := range names {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("pem"), 0o600))
		}
	}
	tests := []struct {
		name string
		args []string
		err  string
	}{
		{name: "secure, self-signed", args: []string{"--metrics-secure"}, err: "loading kubeconfig"},
		{name: "secure, mounted certificate", args: []string{"--metrics-secure", "--metrics-cert-dir=" + certs}, err: "loading kubeconfig"},
		{name: "certificate without secure", args: []string{"--metrics-cert-dir=" + certs}, err: "--metrics-cert-dir needs --metrics-secure"},
		{name: "no key", args: []string{"--metrics-secure", "--metrics-cert-dir=" + onlyCert}, err: "invalid --metrics-cert-dir"},
		{name: "no directory", args: []string{"--metrics-secure", "--metrics-cert-dir=/nonexistent"}, err: `invalid --metrics-cert-dir "/nonexistent"`},
		{name: "instance metrics off", args: []string{"--instance-metrics-interval=0"}, err: "loading kubeconfig"},
		{name: "instance metrics every 30s", args: []string{"--instance-metrics-interval=30s"}, err: "loading kubeconfig"},
		{name: "instance metrics too often", args: []string{"--instance-metrics-interval=500ms"}, err: "invalid --instance-metrics-interval 500ms: must be 0 (off) or at least 1s"},
		{name: "instance metrics negative", args: []string{"--instance-metrics-interval=-1s"}, err: "invalid --instance-metrics-interval -1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(append(tt.args, "--kubeconfig=/nonexistent", "--zap-log-level=error", "--agent-image=ghcr.io/dbkeeper/dbkeeper:test"))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.err)
		})
	}
}

// Without --agent-image the engine pods could not get their agent: the
// manager refuses to start, naming the flag, before it connects anywhere.
func TestAgentImageIsRequired(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	err := run([]string{"--kubeconfig=/nonexistent", "--zap-log-level=error"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--agent-image is required")

	err = run([]string{"--kubeconfig=/nonexistent", "--zap-log-level=error", "--agent-image=ghcr.io/dbkeeper/dbkeeper:test"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "loading kubeconfig", "with the flag the manager gets as far as the kubeconfig")
}
