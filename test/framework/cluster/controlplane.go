package cluster

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/dbkeeper/dbkeeper/internal/manager"
)

// startControlPlane starts etcd and kube-apiserver as the node configured
// them, and writes the admin kubeconfig and client.
func (c *Cluster) startControlPlane() error {
	c.say("starting etcd and kube-apiserver")
	if _, err := c.env.Start(); err != nil {
		return fmt.Errorf("starting etcd and kube-apiserver: %w", err)
	}
	admin, err := c.env.AddUser(crenvtest.User{Name: "dbkeeper-e2e-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding the admin user: %w", err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return fmt.Errorf("writing the admin kubeconfig: %w", err)
	}
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, kubeconfig, 0o600); err != nil {
		return fmt.Errorf("writing the admin kubeconfig: %w", err)
	}
	c.Config = admin.Config()
	if c.Client, err = client.New(c.Config, client.Options{Scheme: manager.Scheme()}); err != nil {
		return fmt.Errorf("creating the admin client: %w", err)
	}
	return nil
}

// startComponents starts kube-controller-manager and kube-scheduler.
func (c *Cluster) startComponents() error {
	sa := filepath.Join(c.env.ControlPlane.APIServer.CertDir, "sa-signer.key")
	kc := "--kubeconfig=" + c.Kubeconfig
	kcm := []string{kc, "--leader-elect=false", "--secure-port=0", "--controllers=*",
		"--use-service-account-credentials=false", "--service-account-private-key-file=" + sa,
		"--kube-api-qps=200", "--kube-api-burst=400", "--concurrent-gc-syncs=20"}
	kcm = append(kcm, c.setup.ControllerManagerArgs...)
	scheduler := []string{kc, "--leader-elect=false", "--secure-port=0", "--kube-api-qps=200", "--kube-api-burst=400"}
	for _, comp := range []struct {
		name string
		args []string
	}{{"kube-controller-manager", kcm}, {"kube-scheduler", scheduler}} {
		c.say("starting " + comp.name)
		if err := c.run(comp.name, comp.args...); err != nil {
			return err
		}
	}
	return nil
}
