package agent

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/pki"
)

// The files of client certificate authentication, in the runtime
// directory: the agent writes them before every start of the server.
const (
	certAuthHBAFile   = "pg_hba.conf"
	certAuthIdentFile = "pg_ident.conf"
)

// clientCA is the file of the CA whose client certificates the server
// accepts (ssl_ca_file).
func (a *Agent) clientCA() string {
	if p := filepath.Join(a.cfg.TLSDir, agentapi.ClientCAFile); fileExists(p) {
		return p
	}
	return filepath.Join(a.cfg.TLSDir, "ca.crt")
}

// clientCert is the certificate and key an instance presents to another
// as ReplicationUser.
func (a *Agent) clientCert() (cert, key string) {
	if p := filepath.Join(a.cfg.TLSDir, agentapi.ClientCertFile); fileExists(p) {
		return p, filepath.Join(a.cfg.TLSDir, agentapi.ClientKeyFile)
	}
	return filepath.Join(a.cfg.TLSDir, "tls.crt"), filepath.Join(a.cfg.TLSDir, "tls.key")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// certAuthArgs are the server options of client certificate
// authentication (Config.ClientCertAuth), none without it.
func (a *Agent) certAuthArgs() []string {
	if !a.cfg.ClientCertAuth {
		return nil
	}
	return engine.Postgres{}.CertAuthArgs(a.clientCA(),
		filepath.Join(a.runtimeDir, certAuthHBAFile), filepath.Join(a.runtimeDir, certAuthIdentFile))
}

// writeCertAuth writes the authentication rules of certAuthArgs: the
// superuser (Config.User) by a certificate of its name, ReplicationUser by
// the certificate the instances present (clientCert), whose common name
// it reads from the TLS directory (every instance of a Database presents
// the same one).
func (a *Agent) writeCertAuth() error {
	if !a.cfg.ClientCertAuth {
		return nil
	}
	certFile, _ := a.clientCert()
	b, err := os.ReadFile(certFile)
	if err != nil {
		return fmt.Errorf("reading the instance certificate: %w", err)
	}
	cert, err := pki.ParseCertificate(b)
	if err != nil {
		return fmt.Errorf("the instance certificate: %w", err)
	}
	if cert.Subject.CommonName == "" {
		return fmt.Errorf("the instance certificate has no common name: the instances could not authenticate to each other")
	}
	pg := engine.Postgres{}
	for name, content := range map[string]string{
		certAuthHBAFile:   pg.CertAuthHBA(a.cfg.User),
		certAuthIdentFile: pg.CertAuthIdent(cert.Subject.CommonName),
	} {
		if _, err := writeFileAtomic(filepath.Join(a.runtimeDir, name), []byte(content)); err != nil {
			return err
		}
	}
	return nil
}
