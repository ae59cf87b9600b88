package realnode

import (
	"crypto/x509/pkix"
	"fmt"
	"net"
	"path/filepath"
	"strconv"

	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
)

// configureAPIServer makes envtest's API server reachable from pods and
// fit for a kubelet: it listens on the node IP with a serving certificate
// from the node's CA (its names include the kubernetes Service's), has the
// ServiceAccount admission plugin back (pods of an in-cluster operator
// need their token), authorizes nodes, and has a client certificate for
// the kubelet's API (kubectl logs/exec).
func (n *Node) configureAPIServer() error {
	dir, env := n.c.Dir, n.c.Env()
	pki := filepath.Join(dir, "pki")
	api := env.ControlPlane.GetAPIServer()
	api.CertDir = filepath.Join(dir, "apiserver")
	env.ControlPlane.Etcd = &crenvtest.Etcd{DataDir: filepath.Join(dir, "etcd")}
	ca, err := writeNodePKI(api.CertDir, pki)
	if err != nil {
		return err
	}
	for _, m := range n.members {
		if err := ca.issue(pki, m.servingCert(), pkix.Name{CommonName: m.name}, true, m.ip, m.name); err != nil {
			return err
		}
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
