package agent_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// testCA signs the servers' certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1000), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// clientCert is a client certificate of ca for role cn, as the manager
// signs for its superuser sessions.
func (ca *testCA) clientCert(t *testing.T, cn string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// tcpLogin connects to in's server over TCP with TLS verified by caFile as
// user, with password and the client certificates certs.
func tcpLogin(ctx context.Context, in *instance, caFile, user, password string, certs ...tls.Certificate) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=127.0.0.1 port=%d user=%s password=%s dbname=postgres sslmode=verify-full sslrootcert=%s connect_timeout=5",
		in.port, user, password, caFile))
	if err != nil {
		return nil, err
	}
	cfg.TLSConfig.Certificates = certs
	return pgx.ConnectConfig(ctx, cfg)
}

// servedSerial is the serial of the certificate in's server presents to a
// client verifying it with the CA (the superuser, with its certificate).
func servedSerial(t *testing.T, in *instance, ca *testCA, caFile string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := tcpLogin(ctx, in, caFile, "postgres", "", ca.clientCert(t, "postgres"))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	tc, ok := conn.PgConn().Conn().(*tls.Conn)
	require.True(t, ok, "the connection is not TLS")
	return tc.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// TestAgentsOverTLS: with a TLS directory and client certificate
// authentication (the Database's CA is dbkeeper's) the agents serve HTTPS
// with the Database's certificate; the standby clones and streams over TLS
// verifying the primary (verify-full) and logging in with the instances'
// certificate, not a password; the superuser and the replication role are
// refused over TCP with their passwords, the superuser is let in with a
// certificate of its name, and the application's role with its password;
// the agent writes the rules outside PGDATA; a certificate renewed in
// place is loaded by the server without a restart.
func TestAgentsOverTLS(t *testing.T) { agentsOverTLS(t, false) }

// TestAgentsOverTLSWithACertManagerIssuer: the same when another CA (a
// cert-manager issuer, which may sign for others too) signs the server
// certificate: client certificates are the Database's own CA's
// (agentapi.ClientCAFile), the instances present the client certificate it
// signed (agentapi.ClientCertFile), and a superuser certificate the server's
// issuer signed is refused (before, both roles logged in with their
// passwords over TCP).
func TestAgentsOverTLSWithACertManagerIssuer(t *testing.T) { agentsOverTLS(t, true) }

func agentsOverTLS(t *testing.T, certManager bool) {
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped under -short")
	}
	c := newCluster(t)
	issuer := newTestCA(t) // signs the server certificate
	ca := issuer           // signs the client certificates
	c.tlsDir = filepath.Join(c.dir, "tls")
	c.mkdir(c.tlsDir, 0o755)
	issuer.writeTLS(t, c.tlsDir, issuer.databaseCert(t, 1), c.uid, c.gid)
	replicationDN := "/CN=orders"
	if certManager {
		ca = newTestCA(t)
		ca.writeClientTLS(t, c.tlsDir, ca.clientCert(t, agentapi.ReplicationUser), c.uid, c.gid)
		replicationDN = "/CN=" + agentapi.ReplicationUser
	}
	c.serverArgs = []string{"-c", "ssl=on", "-c", "ssl_cert_file=" + c.tlsDir + "/tls.crt", "-c", "ssl_key_file=" + c.tlsDir + "/tls.key"}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(issuer.pem)
	c.client.HTTP = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	caFile := filepath.Join(c.tlsDir, "ca.crt")
	ctx := context.Background()
	certAuth := agentapi.EnvClientCertAuth + "=true"

	a := c.start("db-0", certAuth)
	b := c.start("db-1", certAuth)
	resp, err := c.client.HTTP.Get(a.url + agentapi.StatusPath)
	require.NoError(t, err, "HTTPS verified with the Database's CA")
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	_, err = c.client.Bootstrap(ctx, a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	c.waitStatus(a, 90*time.Second, "a running primary", runningAs(agentapi.RolePrimary))
	pa := sql(t, a)
	// the replication role has the agents' password: only the certificate
	// may log it in over TCP
	mustExec(t, pa, fmt.Sprintf("CREATE ROLE %s WITH LOGIN REPLICATION PASSWORD '%s'", agentapi.ReplicationUser, strings.ReplaceAll(replPassword, "'", "''")))
	mustExec(t, pa, "CREATE ROLE app WITH LOGIN PASSWORD 'app-password'")
	mustExec(t, pa, "SELECT pg_create_physical_replication_slot($1)", agentapi.SlotName(b.name))
	mustExec(t, pa, "CREATE TABLE t AS SELECT generate_series(1, 10) AS id")

	for _, login := range []struct{ user, password string }{{"postgres", superPassword}, {agentapi.ReplicationUser, replPassword}} {
		_, err := tcpLogin(ctx, a, caFile, login.user, login.password)
		require.Error(t, err, "%s logged in over TCP with its password", login.user)
		assert.Contains(t, err.Error(), "connection requires a valid client certificate", login.user)
	}
	_, err = tcpLogin(ctx, a, caFile, "postgres", superPassword, ca.clientCert(t, agentapi.ReplicationUser))
	require.Error(t, err, "a certificate for another role logged in the superuser")
	_, err = tcpLogin(ctx, a, caFile, "postgres", "", newTestCA(t).clientCert(t, "postgres"))
	require.Error(t, err, "a certificate of another CA logged in the superuser")
	if certManager {
		_, err = tcpLogin(ctx, a, caFile, "postgres", "", issuer.clientCert(t, "postgres"))
		require.Error(t, err, "a certificate of the server's issuer logged in the superuser")
	}
	conn, err := tcpLogin(ctx, a, caFile, "postgres", "", ca.clientCert(t, "postgres"))
	require.NoError(t, err, "the superuser with a certificate of its name")
	conn.Close(ctx)
	conn, err = tcpLogin(ctx, a, caFile, "app", "app-password")
	require.NoError(t, err, "the application's role with its password")
	conn.Close(ctx)

	c.proxy.target.Store(int32(a.port))
	_, err = c.client.Bootstrap(ctx, b.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapClone})
	require.NoError(t, err)
	c.waitStatus(b, 90*time.Second, "a streaming standby", func(s agentapi.Status) bool {
		return runningAs(agentapi.RoleReplica)(s) && s.WALReceiver == "streaming"
	})
	assert.Equal(t, "true", stringQuery(t, pa, "SELECT s.ssl::text FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid) WHERE r.application_name = $1", b.name),
		"the standby streams over TLS")
	assert.Equal(t, replicationDN, stringQuery(t, pa, "SELECT s.client_dn FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid) WHERE r.application_name = $1", b.name),
		"the standby logs in with the instances' certificate")
	assert.Equal(t, 10, count(t, sql(t, b), "SELECT count(*) FROM t"))
	for _, in := range []*instance{a, b} {
		data, err := os.ReadFile(filepath.Join(in.pgdata, "pg_hba.conf"))
		require.NoError(t, err)
		assert.NotContains(t, string(data), agentapi.ReplicationUser, "with TLS the agent leaves PGDATA's hba file alone")
	}

	// Renewal in place: the server presents the new certificate, without a
	// restart, and the standby streams on with it.
	pid := postmasterPID(a.pgdata)
	assert.EqualValues(t, 1, servedSerial(t, a, ca, caFile))
	issuer.writeTLS(t, c.tlsDir, issuer.databaseCert(t, 2), c.uid, c.gid)
	renewed := time.Now()
	waitFor(t, func() bool { return servedSerial(t, a, ca, caFile) == 2 }, 40*time.Second, "the server presents the renewed certificate")
	t.Logf("renewed certificate served after %s", time.Since(renewed).Round(time.Millisecond))
	assert.Equal(t, pid, postmasterPID(a.pgdata), "the server restarted")
	conn2, err := tls.Dial("tcp", strings.TrimPrefix(a.url, "https://"), &tls.Config{RootCAs: pool})
	require.NoError(t, err)
	assert.EqualValues(t, 2, conn2.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), "the agent's endpoint serves the renewed certificate")
	conn2.Close()
	mustExec(t, pa, "INSERT INTO t VALUES (11)")
	waitFor(t, func() bool { return count(t, sql(t, b), "SELECT count(*) FROM t") == 11 }, 20*time.Second, "the standby streams after the renewal")
}
