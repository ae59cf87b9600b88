package operator

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/dbkeeper/dbkeeper/test/framework"
	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
)

// Build compiles cmd/manager into <root>/bin/<name> with the extra go build
// flags (such as -race, which reuses the race-built packages of `go test
// -race`) and returns its path.
func Build(t testing.TB, name string, flags ...string) string {
	t.Helper()
	root, err := envtest.RepoRoot()
	require.NoError(t, err)
	out := filepath.Join(root, "bin", name)
	args := append(append([]string{"build"}, flags...), "-o", out, "./cmd/manager")
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	started := time.Now()
	output, err := cmd.CombinedOutput()
	require.NoError(t, err, "go %v:\n%s", args, output)
	t.Logf("built %s in %s", out, time.Since(started).Round(100*time.Millisecond))
	return out
}

// WriteKubeconfig writes cfg (a client-certificate user, as envtest makes)
// as a kubeconfig file in dir and returns its path.
func WriteKubeconfig(t testing.TB, cfg *rest.Config, dir string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	path := filepath.Join(dir, fmt.Sprintf("kubeconfig-%d", time.Now().UnixNano()))
	require.NoError(t, clientcmd.WriteToFile(*kc, path))
	return path
}

// Process is a manager binary running as a child process of the test.
type Process struct {
	cmd  *exec.Cmd
	out  *framework.SyncBuffer
	done chan struct{}
}

// StartProcess runs the manager binary with args until Kill or the end of
// the test; its output is kept for Output and printed if the test fails.
func StartProcess(t testing.TB, binary string, args ...string) *Process {
	t.Helper()
	p := &Process{cmd: exec.Command(binary, args...), out: &framework.SyncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = framework.SysProcAttr()
	require.NoError(t, p.cmd.Start())
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("output of %s (pid %d):\n%s", filepath.Base(binary), p.cmd.Process.Pid, p.Output())
		}
	})
	return p
}

// Kill sends SIGKILL, as a crash or an evicted node would, and waits for
// the process to exit. Killing an exited process does nothing.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Output is what the process printed so far.
func (p *Process) Output() string { return p.out.String() }

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }
