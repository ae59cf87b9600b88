package main

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const validNames = "statefulset, service, secret, backup, cleanup, readiness"

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

func TestBinaryRefusesBogusControllers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped under -short")
	}
	bin := filepath.Join(t.TempDir(), "manager")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	cmd := exec.Command(bin, "--controllers=bogus", "--kubeconfig=/nonexistent")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "the manager must exit non-zero, got %v", err)
	assert.Equal(t, 1, exit.ExitCode())
	assert.Contains(t, stderr.String(), `unknown controller "bogus"`)
	assert.Contains(t, stderr.String(), validNames)
}
