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
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/agent"
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

// issue writes tls.crt, tls.key (for 127.0.0.1) and ca.crt into dir, as
// the mounted Secret holds them, owned by uid.
func (ca *testCA) issue(t *testing.T, dir string, serial int64, uid, gid int) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "db"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	files := map[string][]byte{
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
		"ca.crt":  ca.pem,
	}
	for name, b := range files {
		// written beside and renamed, as the kubelet swaps a Secret's files
		tmp := filepath.Join(dir, "."+name)
		require.NoError(t, os.WriteFile(tmp, b, 0o600))
		require.NoError(t, os.Chown(tmp, uid, gid))
		require.NoError(t, os.Rename(tmp, filepath.Join(dir, name)))
	}
}

// servedSerial is the serial of the certificate in's server presents to a
// client verifying it with the CA.
func servedSerial(t *testing.T, in *instance, caFile string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("host=127.0.0.1 port=%d user=postgres password=%s dbname=postgres sslmode=verify-full sslrootcert=%s",
		in.port, superPassword, caFile))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	tc, ok := conn.PgConn().Conn().(*tls.Conn)
	require.True(t, ok, "the connection is not TLS")
	return tc.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// TestAgentsOverTLS: with a TLS directory the agents serve HTTPS with the
// Database's certificate, the standby clones and streams over TLS
// verifying the primary (verify-full), the hba file is the operator's (the
// agent adds nothing to PGDATA's), and a certificate renewed in place is
// loaded by the server without a restart.
func TestAgentsOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped under -short")
	}
	c := newCluster(t)
	ca := newTestCA(t)
	c.tlsDir = filepath.Join(c.dir, "tls")
	c.mkdir(c.tlsDir, 0o755)
	ca.issue(t, c.tlsDir, 1, c.uid, c.gid)
	hba := filepath.Join(c.dir, "pg_hba.conf")
	require.NoError(t, os.WriteFile(hba, []byte("local all all trust\n"+
		"hostssl replication "+agent.ReplicationUser+" 127.0.0.1/32 scram-sha-256\n"+
		"hostssl all all 127.0.0.1/32 scram-sha-256\n"), 0o644))
	c.serverArgs = []string{"-c", "ssl=on", "-c", "ssl_cert_file=" + c.tlsDir + "/tls.crt", "-c", "ssl_key_file=" + c.tlsDir + "/tls.key", "-c", "hba_file=" + hba}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	c.client.HTTP = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	caFile := filepath.Join(c.tlsDir, "ca.crt")
	ctx := context.Background()

	a := c.start("db-0")
	b := c.start("db-1")
	resp, err := c.client.HTTP.Get(a.url + agent.StatusPath)
	require.NoError(t, err, "HTTPS verified with the Database's CA")
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	_, err = c.client.Bootstrap(ctx, a.url, agent.BootstrapRequest{Mode: agent.BootstrapInitdb})
	require.NoError(t, err)
	c.waitStatus(a, 90*time.Second, "a running primary", runningAs(agent.RolePrimary))
	pa := sql(t, a)
	mustExec(t, pa, fmt.Sprintf("CREATE ROLE %s WITH LOGIN REPLICATION PASSWORD '%s'", agent.ReplicationUser, strings.ReplaceAll(replPassword, "'", "''")))
	mustExec(t, pa, "SELECT pg_create_physical_replication_slot($1)", agent.SlotName(b.name))
	mustExec(t, pa, "CREATE TABLE t AS SELECT generate_series(1, 10) AS id")

	c.proxy.target.Store(int32(a.port))
	_, err = c.client.Bootstrap(ctx, b.url, agent.BootstrapRequest{Mode: agent.BootstrapClone})
	require.NoError(t, err)
	c.waitStatus(b, 90*time.Second, "a streaming standby", func(s agent.Status) bool {
		return runningAs(agent.RoleReplica)(s) && s.WALReceiver == "streaming"
	})
	assert.Equal(t, "true", stringQuery(t, pa, "SELECT s.ssl::text FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid) WHERE r.application_name = $1", b.name),
		"the standby streams over TLS")
	assert.Equal(t, 10, count(t, sql(t, b), "SELECT count(*) FROM t"))
	for _, in := range []*instance{a, b} {
		data, err := os.ReadFile(filepath.Join(in.pgdata, "pg_hba.conf"))
		require.NoError(t, err)
		assert.NotContains(t, string(data), agent.ReplicationUser, "with TLS the agent leaves PGDATA's hba file alone")
	}

	// Renewal in place: the server presents the new certificate, without a
	// restart.
	pid := postmasterPID(a.pgdata)
	assert.EqualValues(t, 1, servedSerial(t, a, caFile))
	ca.issue(t, c.tlsDir, 2, c.uid, c.gid)
	renewed := time.Now()
	waitFor(t, func() bool { return servedSerial(t, a, caFile) == 2 }, 40*time.Second, "the server presents the renewed certificate")
	t.Logf("renewed certificate served after %s", time.Since(renewed).Round(time.Millisecond))
	assert.Equal(t, pid, postmasterPID(a.pgdata), "the server restarted")
	conn, err := tls.Dial("tcp", strings.TrimPrefix(a.url, "https://"), &tls.Config{RootCAs: pool})
	require.NoError(t, err)
	assert.EqualValues(t, 2, conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), "the agent's endpoint serves the renewed certificate")
	conn.Close()
}
