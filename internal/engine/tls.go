package engine

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// TLS is how an engine serves TLS, embedded in Engine.
type TLS interface {
	// TLSArgs are the server options (appended to Replication.ServerArgs)
	// that start the server with TLS on, the certificate and key in
	// certFile and keyFile, and the client authentication rules of hbaFile
	// (see HostBasedAuth).
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
	return []string{
		"-c", "ssl=on",
		"-c", "ssl_cert_file=" + certFile,
		"-c", "ssl_key_file=" + keyFile,
		"-c", "hba_file=" + hbaFile,
	}
}

// HostBasedAuth implements TLS: the unix socket (the entrypoint's
// bootstrap, the agent's and an operator's kubectl exec) trusts the pod's
// own processes as the image's initdb does; TCP needs TLS and a SCRAM
// password, for the standbys' streaming too (the "replication" pseudo
// database matches no "all" line, so ReplicationUser gets a line of its
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
		"hostssl  replication  " + ReplicationUser + "  all      scram-sha-256",
		"hostssl  postgres     " + ReplicationUser + "  all      scram-sha-256",
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
