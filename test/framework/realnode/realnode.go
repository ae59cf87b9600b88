package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
)

// startRealNodeHost takes the node lock, undoes what a dead owner left,
// builds the images, and makes the host changes the node needs (each
// recorded in the journal first). It returns the image manifest.
func (c *Cluster) startRealNodeHost(root string, o Options) ([]image, error) {
	if err := RealNodeSupported(); err != nil {
		return nil, fmt.Errorf("a real node cannot run here: %w", err)
	}
	lock, err := acquireLock(o.LockWait, c.say)
	if err != nil {
		return nil, err
	}
	c.lock = lock
	if err := cleanupDead(c.say); err != nil {
		return nil, fmt.Errorf("cleaning up after a dead real node: %w", err)
	}
	images, err := buildImages(root, o.Images, c.say)
	if err != nil {
		return nil, err
	}
	c.Images = map[string]string{}
	for _, img := range images {
		c.Images[img.key] = img.ref
	}
	if c.Dir, err = newRealNodeDir(); err != nil {
		return nil, err
	}
	croot, err := containerdRoot()
	if err != nil {
		return nil, err
	}
	c.journal = &journal{Owner: os.Getpid(), Dir: c.Dir, ContainerdRoot: croot, Keep: c.keep, Started: time.Now()}
	if err := c.journal.save(); err != nil {
		return nil, err
	}
	c.say(fmt.Sprintf("creating bridge %s (%s/24), the Service route and the guard table inet %s", Bridge, NodeIP, guardTable))
	if err := setUpNetwork(c.journal); err != nil {
		return nil, err
	}
	for _, d := range []string{"pki", "apiserver", "etcd"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("creating the cluster directory: %w", err)
		}
	}
	return images, nil
}

// configureRealNodeAPIServer makes envtest's API server reachable from pods
// and fit for a kubelet: it listens on the node IP with a serving
// certificate from the node's CA (its names include the kubernetes
// Service's), has the ServiceAccount admission plugin back (pods of an
// in-cluster operator need their token), authorizes nodes, and has a client
// certificate for the kubelet's API (kubectl logs/exec).
func (c *Cluster) configureRealNodeAPIServer() error {
	pki := filepath.Join(c.Dir, "pki")
	api := c.env.ControlPlane.GetAPIServer()
	api.CertDir = filepath.Join(c.Dir, "apiserver")
	c.env.ControlPlane.Etcd = &crenvtest.Etcd{DataDir: filepath.Join(c.Dir, "etcd")}
	ca, err := writeNodePKI(api.CertDir, pki, RealNodeName)
	if err != nil {
		return err
	}
	port, err := freePortOn(NodeIP)
	if err != nil {
		return err
	}
	api.SecureServing.Address, api.SecureServing.Port = NodeIP, strconv.Itoa(port)
	// envtest skips generating apiserver.crt when it exists; then the admin
	// configuration must trust our CA instead of its own.
	api.SecureServing.CA = ca.pem
	args := api.Configure()
	args.Set("service-cluster-ip-range", realServiceRange)
	args.Set("advertise-address", NodeIP)
	args.Disable("disable-admission-plugins")
	args.Set("enable-admission-plugins", "ServiceAccount,NodeRestriction")
	args.Set("authorization-mode", "Node,RBAC")
	args.Set("kubelet-client-certificate", filepath.Join(pki, "apiserver-kubelet-client.crt"))
	args.Set("kubelet-client-key", filepath.Join(pki, "apiserver-kubelet-client.key"))
	args.Set("kubelet-certificate-authority", filepath.Join(pki, "ca.crt"))
	args.Set("kubelet-preferred-address-types", "InternalIP")
	args.Set("service-account-issuer", "https://kubernetes.default.svc."+clusterDomain)
	return nil
}

// freePortOn returns a TCP port nobody listens on now at address ip.
func freePortOn(ip string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, fmt.Errorf("finding a free port on %s: %w", ip, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startRealNode starts containerd with the images, the kubelet, kube-proxy,
// CoreDNS and the kube-dns Service, once the control plane runs.
func (c *Cluster) startRealNode(ctx context.Context, images []image) error {
	pki := filepath.Join(c.Dir, "pki")
	users := []struct {
		file string
		user crenvtest.User
	}{
		{"kubelet.kubeconfig", crenvtest.User{Name: "system:node:" + RealNodeName, Groups: []string{"system:nodes"}}},
		{"kube-proxy.kubeconfig", crenvtest.User{Name: "system:kube-proxy"}},
	}
	for _, u := range users {
		au, err := c.env.AddUser(u.user, nil)
		if err != nil {
			return fmt.Errorf("adding user %s: %w", u.user.Name, err)
		}
		data, err := au.KubeConfig()
		if err != nil {
			return fmt.Errorf("writing the kubeconfig of %s: %w", u.user.Name, err)
		}
		if err := os.WriteFile(filepath.Join(pki, u.file), data, 0o600); err != nil {
			return fmt.Errorf("writing the kubeconfig of %s: %w", u.user.Name, err)
		}
	}
	pause := ""
	for _, img := range images {
		if img.key == ImagePause {
			pause = img.ref
		}
	}
	c.say("starting containerd")
	if err := c.startContainerd(ctx, c.journal.ContainerdRoot, pause); err != nil {
		return err
	}
	if err := c.removeSandboxes(); err != nil {
		return err
	}
	if err := c.importImages(c.journal.ContainerdRoot, images); err != nil {
		return err
	}
	c.say("starting the kubelet and kube-proxy")
	if err := c.startKubelet(pki, filepath.Join(pki, "kubelet.kubeconfig")); err != nil {
		return err
	}
	if err := c.startKubeProxy(filepath.Join(pki, "kube-proxy.kubeconfig")); err != nil {
		return err
	}
	c.say("starting CoreDNS on " + NodeIP + ":53")
	return c.startDNS(ctx, c.Kubeconfig)
}

// stopRealNode undoes the host changes and releases the lock, after the
// processes were stopped.
func (c *Cluster) stopRealNode() error {
	if c.journal == nil {
		c.lock.release()
		c.lock = nil
		return nil
	}
	err := undo(c.journal, c.say)
	c.journal = nil
	c.lock.release()
	c.lock = nil
	return err
}
