package agent

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/pki"
)

// The files of client certificate authentication, in the runtime
// directory: the agent writes them before every start of the server.
const (
	certAuthHBAFile   = "pg_hba.conf"
	certAuthIdentFile = "pg_ident.conf"
)

// certAuthArgs are the server options of client certificate
// authentication (Config.ClientCertAuth), none without it.
func (a *Agent) certAuthArgs() []string {
	if !a.cfg.ClientCertAuth {
		return nil
	}
	return engine.Postgres{}.CertAuthArgs(filepath.Join(a.cfg.TLSDir, "ca.crt"),
		filepath.Join(a.runtimeDir, certAuthHBAFile), filepath.Join(a.runtimeDir, certAuthIdentFile))
}

// writeCertAuth writes the authentication rules of certAuthArgs: the
// superuser (Config.User) by a certificate of its name, ReplicationUser by
// the certificate the instances serve, whose common name it reads from the
// TLS directory (every instance of a Database serves the same one).
func (a *Agent) writeCertAuth() error {
	if !a.cfg.ClientCertAuth {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(a.cfg.TLSDir, "tls.crt"))
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
