package agent

import (
	"fmt"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// primaryConninfo is how a standby reaches the primary.
func (a *Agent) primaryConninfo() string {
	return a.replicationConninfo(a.cfg.Pod, "")
}

// connectTimeout bounds each attempt of the replication role's
// connections to PrimaryHost: the WAL receiver, pg_basebackup and
// pg_rewind. A connection to the read-write Service while no pod carries
// the primary label may be neither accepted nor refused (this node's
// kube-proxy drops its SYNs): unbounded, a standby's WAL receiver waited
// for TCP's SYN back-off, and in synchronous mode writes waited with it,
// 15 s after the primary was labelled again. libpq's connect_timeout
// bounds the blocking connects of pg_basebackup and pg_rewind; the WAL
// receiver connects asynchronously, which ignores it, so the kernel's
// TCP_USER_TIMEOUT (tcp_user_timeout, which Linux applies to SYN
// retransmissions too) bounds it, and an established stream whose data
// goes unacknowledged as long.
const connectTimeout = 5 * time.Second

// replicationConninfo is the libpq connection string of the replication
// role to PrimaryHost, as application app, to database dbname ("" for
// none): the certificate verified when the Database has TLS, each attempt
// bounded by connectTimeout.
func (a *Agent) replicationConninfo(app, dbname string) string {
	ci := fmt.Sprintf("host=%s port=%d user=%s passfile=%s application_name=%s connect_timeout=%d tcp_user_timeout=%d",
		conninfoValue(a.cfg.PrimaryHost), a.cfg.PrimaryPort, agentapi.ReplicationUser, conninfoValue(a.pgpass), conninfoValue(app),
		int(connectTimeout/time.Second), connectTimeout.Milliseconds())
	if dbname != "" {
		ci += " dbname=" + conninfoValue(dbname)
	}
	return ci + a.sslConninfo()
}

// sslConninfo is the TLS part of the replication role's connection
// strings: the primary verified with the Database's CA (verify-full) and,
// with client certificate authentication, the instances' client
// certificate presented (clientCert); without TLS, prefer.
func (a *Agent) sslConninfo() string {
	if a.cfg.TLSDir == "" {
		return " sslmode=prefer"
	}
	ci := " sslmode=verify-full sslrootcert=" + conninfoValue(a.cfg.TLSDir+"/ca.crt")
	if a.cfg.ClientCertAuth {
		cert, key := a.clientCert()
		ci += " sslcert=" + conninfoValue(cert) + " sslkey=" + conninfoValue(key)
	}
	return ci
}

// sslEnv is libpq's TLS environment for pg_basebackup, and its connect
// timeout.
func (a *Agent) sslEnv() []string {
	timeout := fmt.Sprintf("PGCONNECT_TIMEOUT=%d", int(connectTimeout/time.Second))
	if a.cfg.TLSDir == "" {
		return []string{"PGSSLMODE=prefer", timeout}
	}
	env := []string{"PGSSLMODE=verify-full", "PGSSLROOTCERT=" + a.cfg.TLSDir + "/ca.crt", timeout}
	if a.cfg.ClientCertAuth {
		cert, key := a.clientCert()
		env = append(env, "PGSSLCERT="+cert, "PGSSLKEY="+key)
	}
	return env
}
