// Package envtest finds the repository and the test control plane
// binaries, and starts a controller-runtime envtest.Environment with the
// dbkeeper CRDs installed. It is meant for TestMain functions of integration
// test packages; the binaries are built by test/tools/install.sh (or named by
// $KUBEBUILDER_ASSETS).
package envtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ModulePath is the module path of the dbkeeper repository; RepoRoot looks
// for the go.mod that declares it, so the nested tool modules under
// test/tools are skipped.
const ModulePath = "github.com/dbkeeper/dbkeeper"

// AssetsEnv is the environment variable naming the directory with etcd,
// kube-apiserver and kubectl (and, in this repository, controller-gen).
const AssetsEnv = "KUBEBUILDER_ASSETS"

// RepoRoot returns the root of the dbkeeper repository: the nearest directory
// at or above the working directory whose go.mod declares ModulePath.
func RepoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the repository root: %w", err)
	}
	for dir := wd; ; {
		if isModuleRoot(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("finding the repository root: no go.mod declaring module %s at or above %s", ModulePath, wd)
		}
		dir = parent
	}
}

// isModuleRoot reports whether the go.mod at path declares ModulePath.
func isModuleRoot(path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == ModulePath
		}
	}
	return false
}

// AssetsDir returns the directory with the test control plane binaries:
// $KUBEBUILDER_ASSETS when set, else the directory printed by
// `<root>/test/tools/install.sh --print`. It does not build anything; run
// `make tools` for that. It fails when the directory has no kube-apiserver.
func AssetsDir() (string, error) {
	dir := os.Getenv(AssetsEnv)
	if dir == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", err
		}
		script := filepath.Join(root, "test", "tools", "install.sh")
		cmd := exec.Command(script, "--print")
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("running %s --print: %w: %s", script, err, strings.TrimSpace(stderr.String()))
		}
		dir = strings.TrimSpace(string(out))
		if dir == "" {
			return "", fmt.Errorf("%s --print printed nothing", script)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err != nil {
		return "", fmt.Errorf("test control plane binaries in %s: %w (run `make tools`, or set %s)", dir, err, AssetsEnv)
	}
	return dir, nil
}

// Env is a running envtest.Environment whose API server can be restarted
// with its certificates, port and etcd data kept, so clients made before a
// restart work after it.
type Env struct {
	*crenvtest.Environment
	certDir string
}

// Start starts one envtest.Environment (etcd and kube-apiserver from
// AssetsDir) with the CRDs of <root>/config/crd/bases installed, and returns
// it with the rest.Config of its admin user. The caller stops it with
// Stop, typically at the end of TestMain. On error nothing is left running.
func Start() (*Env, *rest.Config, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, nil, err
	}
	assets, err := AssetsDir()
	if err != nil {
		return nil, nil, err
	}
	// The API server's certificates live in a directory of ours, which
	// envtest neither regenerates nor removes when the server restarts.
	certDir, err := os.MkdirTemp("", "dbkeeper-apiserver-")
	if err != nil {
		return nil, nil, fmt.Errorf("creating the API server's directory: %w", err)
	}
	env := &Env{certDir: certDir, Environment: &crenvtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}}
	server := env.ControlPlane.GetAPIServer()
	server.CertDir = certDir
	cfg, err := env.Environment.Start()
	if err != nil {
		if stopErr := env.Stop(); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("stopping the half-started environment: %w", stopErr))
		}
		return nil, nil, fmt.Errorf("starting envtest with binaries from %s: %w", assets, err)
	}
	return env, cfg, nil
}

// RestartAPIServer kills the kube-apiserver (SIGKILL, as a crash would:
// a graceful stop drains its watches for a minute), leaves it down for
// downtime, and starts it again on the same port with the same
// certificates and users; etcd keeps running with its data. Linux only: the
// process is found in /proc by the certificate directory in its arguments.
func (e *Env) RestartAPIServer(downtime time.Duration) error {
	pid, err := e.apiServerPID()
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing kube-apiserver (pid %d): %w", pid, err)
	}
	server := e.ControlPlane.GetAPIServer()
	if err := server.Stop(); err != nil {
		return fmt.Errorf("reaping kube-apiserver: %w", err)
	}
	time.Sleep(downtime)
	// A restart replays etcd's data into the server's caches: on a loaded
	// 2-core machine it took longer than envtest's default 20 s.
	server.StartTimeout = 2 * time.Minute
	if err := server.Start(); err != nil {
		return fmt.Errorf("starting kube-apiserver again: %w", err)
	}
	return nil
}

// apiServerPID finds the kube-apiserver whose arguments name our
// certificate directory.
func (e *Env) apiServerPID() (int, error) {
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		cmdline, err := os.ReadFile(p)
		if err != nil {
			continue // gone meanwhile
		}
		args := strings.Split(string(cmdline), "\x00")
		if filepath.Base(args[0]) != "kube-apiserver" || !strings.Contains(string(cmdline), e.certDir) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(p, "/proc/%d/cmdline", &pid); err == nil {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no kube-apiserver process with %s in its arguments", e.certDir)
}

// Stop stops the API server and etcd and removes their files.
func (e *Env) Stop() error {
	err := e.Environment.Stop()
	return errors.Join(err, os.RemoveAll(e.certDir))
}
