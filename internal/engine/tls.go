package engine

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// TLS is how an engine serves TLS, embedded in Engine.
type TLS interface {
	// TLSArgs are the server options (appended to Replication.ServerArgs)
	// that start the server with TLS on, the certificate and key in
	// certFile and keyFile, and the client authentication rules of hbaFile
	// (see HostBasedAuth); an empty hbaFile leaves the rules to the agent
	// (Postgres.CertAuthArgs).
	TLSArgs(certFile, keyFile, hbaFile string) []string
	// HostBasedAuth is the content of the authentication rules file that
	// requires TLS (and a password) on every TCP connection.
	HostBasedAuth() string
	// ClientTLSEnv is the environment that makes the engine's own clients
	// (backup, restore) connect with TLS and verify the server's
	// certificate and host name against the CA in rootCertFile.
	ClientTLSEnv(rootCertFile string) []corev1.EnvVar
}

// PostgresHBAKey is the ConfigMap key (and file name) of PostgreSQL's
// client authentication rules.
const PostgresHBAKey = "pg_hba.conf"

// TLSArgs implements TLS: options of the "postgres" command of ServerArgs;
// the entrypoint's socket-only bootstrap server and the final server both
// get them.
func (Postgres) TLSArgs(certFile, keyFile, hbaFile string) []string {
	args := []string{
		"-c", "ssl=on",
		"-c", "ssl_cert_file=" + certFile,
		"-c", "ssl_key_file=" + keyFile,
	}
	if hbaFile != "" {
		args = append(args, "-c", "hba_file="+hbaFile)
	}
	return args
}

// CertAuthMap is the name of the pg_ident map (CertAuthIdent) that lets
// the instances' certificate log in as agentapi.ReplicationUser.
const CertAuthMap = "instances"

// CertAuthArgs are the server options that make it ask TCP clients for a
// certificate signed by the CA in caFile and take the rules of hbaFile
// (CertAuthHBA) and identFile (CertAuthIdent). The agent adds them after
// TLSArgs when the Database's CA is dbkeeper's own.
func (Postgres) CertAuthArgs(caFile, hbaFile, identFile string) []string {
	return []string{
		"-c", "ssl_ca_file=" + caFile,
		"-c", "hba_file=" + hbaFile,
		"-c", "ident_file=" + identFile,
	}
}

// CertAuthHBA are the client authentication rules of a server whose
// clients may present certificates from the Database's own CA: no
// password logs in the superuser or agentapi.ReplicationUser over the network.
//   - the unix socket trusts the pod's own processes (the entrypoint's
//     bootstrap, the agent, kubectl exec: see docs/design/security.md);
//   - agentapi.ReplicationUser streams (the "replication" pseudo database) and
//     reads the primary's files for pg_rewind (the postgres database)
//     with the instances' own certificate, which CertAuthMap admits, and
//     nothing else;
//   - superuser logs in with a certificate whose common name is its name
//     (the manager signs one for each session with the Database's CA);
//   - everyone else with TLS and a SCRAM password; plaintext TCP is
//     refused.
func (Postgres) CertAuthHBA(superuser string) string {
	return strings.Join([]string{
		"# Written by dbkeeper's agent: no password logs in " + superuser + " or " + agentapi.ReplicationUser + " over TCP.",
		"# TYPE   DATABASE     USER                  ADDRESS  METHOD",
		"local    all          all                            trust",
		"hostssl  replication  " + agentapi.ReplicationUser + "  all      cert map=" + CertAuthMap,
		"hostssl  postgres     " + agentapi.ReplicationUser + "  all      cert map=" + CertAuthMap,
		"hostssl  all          " + agentapi.ReplicationUser + "  all      reject",
		"hostssl  all          " + hbaName(superuser) + "  all      cert",
		"hostssl  all          all                   all      scram-sha-256",
		"host     all          all                   all      reject",
		"",
	}, "\n")
}

// CertAuthIdent is the user name map of CertAuthHBA: the common name of
// the instances' certificate (every instance of a Database serves the same
// one) logs in as agentapi.ReplicationUser.
func (Postgres) CertAuthIdent(instanceCN string) string {
	return strings.Join([]string{
		"# Written by dbkeeper's agent.",
		"# MAPNAME  SYSTEM-USERNAME  PG-USERNAME",
		CertAuthMap + "  " + hbaName(instanceCN) + "  " + agentapi.ReplicationUser,
		"",
	}, "\n")
}

// hbaName quotes a name for pg_hba.conf and pg_ident.conf: in double
// quotes, which also keeps a name such as "all" or one starting with "+"
// or "/" from meaning a keyword, a group or a regular expression.
func hbaName(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// HostBasedAuth implements TLS: the unix socket (the entrypoint's
// bootstrap, the agent's and an operator's kubectl exec) trusts the pod's
// own processes as the image's initdb does; TCP needs TLS and a SCRAM
// password, for the standbys' streaming too (the "replication" pseudo
// database matches no "all" line, so agentapi.ReplicationUser gets a line of its
// own, and one for the postgres database, which pg_rewind reads a former
// primary's new source from: "all" covers it today, the line says so on
// purpose); plaintext TCP is refused with the server's "pg_hba.conf rejects
// connection ... no encryption".
func (Postgres) HostBasedAuth() string {
	return strings.Join([]string{
		"# Written by dbkeeper (spec.tls): TCP connections need TLS.",
		"# TYPE   DATABASE     USER                  ADDRESS  METHOD",
		"local    all          all                            trust",
		"hostssl  all          all                   all      scram-sha-256",
		"hostssl  replication  " + agentapi.ReplicationUser + "  all      scram-sha-256",
		"hostssl  postgres     " + agentapi.ReplicationUser + "  all      scram-sha-256",
		"host     all          all                   all      reject",
		"",
	}, "\n")
}

// ClientTLSEnv implements TLS with libpq's variables.
func (Postgres) ClientTLSEnv(rootCertFile string) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "PGSSLMODE", Value: "verify-full"},
		{Name: "PGSSLROOTCERT", Value: rootCertFile},
	}
}
