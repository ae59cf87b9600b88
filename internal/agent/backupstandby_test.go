package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/pki"
)

// TestPickStandby: the streaming standby least behind, by name on a tie
// and a known lag before an unknown one; never the primary itself, a
// standby that is not streaming (a clone's backup, catchup), or a name
// that is not a pod's (a DNS label).
func TestPickStandby(t *testing.T) {
	for _, c := range []struct {
		name string
		reps []replica
		want string
	}{
		{"none", nil, ""},
		{"catching up only", []replica{{"db-1", "catchup", 10}, {"db-2", "backup", 0}}, ""},
		{"one streaming", []replica{{"db-1", "catchup", 0}, {"db-2", "streaming", 100}}, "db-2"},
		{"least behind", []replica{{"db-1", "streaming", 500}, {"db-2", "streaming", 20}}, "db-2"},
		{"tie by name", []replica{{"db-2", "streaming", 0}, {"db-1", "streaming", 0}}, "db-1"},
		{"known lag first", []replica{{"db-1", "streaming", -1}, {"db-2", "streaming", 1 << 30}}, "db-2"},
		{"unknown lag still", []replica{{"db-1", "streaming", -1}}, "db-1"},
		{"not itself", []replica{{"db-0", "streaming", 0}}, ""},
		{"not a pod name", []replica{{"pg_basebackup", "streaming", 0}, {"", "streaming", 0}, {"DB-1", "streaming", 0}, {"db-1.x", "streaming", 0}}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, pickStandby("db-0", c.reps))
		})
	}
}

// TestStandbyBackupArgs: pg2 is the standby through its TLS server, with
// the copies of the Database's certificate, key and CA, and its server's
// data directory, socket, port and superuser; the warnings reach stderr
// (they say why pg2 could not be used).
func TestStandbyBackupArgs(t *testing.T) {
	p := Peer{Host: "orders-1.orders-headless.shop.svc", Port: 8432, PGData: "/var/lib/postgresql/data/pgdata", SocketDir: "/var/run/postgresql", PGPort: 5432}
	got := standbyBackupArgs(p, "/tmp/rt/tls", "postgres")
	assert.Equal(t, []string{
		"--backup-standby=y",
		"--pg2-host=orders-1.orders-headless.shop.svc",
		"--pg2-host-type=tls",
		"--pg2-host-port=8432",
		"--pg2-host-cert-file=/tmp/rt/tls/tls.crt",
		"--pg2-host-key-file=/tmp/rt/tls/tls.key",
		"--pg2-host-ca-file=/tmp/rt/tls/ca.crt",
		"--pg2-path=/var/lib/postgresql/data/pgdata",
		"--pg2-socket-path=/var/run/postgresql",
		"--pg2-port=5432",
		"--pg2-user=postgres",
		"--log-level-stderr=warn",
	}, got)
}

// TestPeerAddress: a standby is <pod>.<peer domain> at the TLS server's
// port with this instance's paths, unless Peers names it; without a peer
// domain it has no address.
func TestPeerAddress(t *testing.T) {
	a := &Agent{cfg: Config{PGData: "/data", SocketDir: "/run", Port: 5432, BackupServerPort: 8432, PeerDomain: "orders-headless.shop.svc",
		Peers: map[string]Peer{"db-9": {Host: "localhost", Port: 1234, PGData: "/d9", SocketDir: "/r9", PGPort: 5439}}}}
	p, ok := a.peer("orders-1")
	require.True(t, ok)
	assert.Equal(t, Peer{Host: "orders-1.orders-headless.shop.svc", Port: 8432, PGData: "/data", SocketDir: "/run", PGPort: 5432}, p)
	p, ok = a.peer("db-9")
	require.True(t, ok)
	assert.Equal(t, "localhost", p.Host)
	a.cfg.PeerDomain = ""
	_, ok = a.peer("orders-1")
	assert.False(t, ok)
}

// TestStandbyErrorSaysWhy: pgBackRest's warning about pg2 (a refused
// client certificate) comes before its error.
func TestStandbyErrorSaysWhy(t *testing.T) {
	out := "WARN: unable to check pg2: [ServiceError] TLS error [1:167773208] tlsv1 alert unknown ca\n" +
		"ERROR: [056]: unable to find standby cluster - cannot proceed\n"
	got := standbyError(out, errors.New("pgbackrest backup: ERROR: [056]: unable to find standby cluster - cannot proceed"))
	assert.Equal(t, "unable to check pg2: [ServiceError] TLS error [1:167773208] tlsv1 alert unknown ca; "+
		"pgbackrest backup: ERROR: [056]: unable to find standby cluster - cannot proceed", got)
	assert.Equal(t, "x", standbyError("ERROR: x", errors.New("x")))
}

// TestBackupServerConfig: the TLS server serves the copies of the
// Database's files and accepts only the certificate's common name, for
// the stanza; it writes no log file.
func TestBackupServerConfig(t *testing.T) {
	conf := backupServerConfig("/rt/tls", "/rt", "*", 8432, "orders")
	for _, l := range []string{"[global]", "tls-server-address=*", "tls-server-port=8432", "tls-server-cert-file=/rt/tls/tls.crt",
		"tls-server-key-file=/rt/tls/tls.key", "tls-server-ca-file=/rt/tls/ca.crt", "tls-server-auth=orders=db", "log-level-file=off"} {
		assert.Contains(t, strings.Split(conf, "\n"), l)
	}
	assert.NotContains(t, conf, "repo1-", "the server's configuration holds no repository (nor its keys)")
}

// TestProbeBackupServer: the probe passes a server that takes the
// certificate, and fails at once on one that refuses it (another CA) or
// a port nobody listens on.
func TestProbeBackupServer(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("orders CA", now)
	require.NoError(t, err)
	pair, err := pki.IssueServer(ca, []string{"orders", "localhost"}, now, time.Hour)
	require.NoError(t, err)
	dir := t.TempDir()
	for name, b := range map[string][]byte{"tls.crt": pair.Cert, "tls.key": pair.Key, "ca.crt": ca.Cert} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o600))
	}
	serve := func(clientCA []byte) int {
		cert, err := tls.X509KeyPair(pair.Cert, pair.Key)
		require.NoError(t, err)
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(clientCA)
		l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert})
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					_ = c.(*tls.Conn).Handshake()
					time.Sleep(2 * time.Second)
				}()
			}
		}()
		return l.Addr().(*net.TCPAddr).Port
	}
	ctx := context.Background()
	assert.NoError(t, probeBackupServer(ctx, Peer{Host: "localhost", Port: serve(ca.Cert)}, dir))
	other, err := pki.NewCA("another CA", now)
	require.NoError(t, err)
	assert.ErrorContains(t, probeBackupServer(ctx, Peer{Host: "localhost", Port: serve(other.Cert)}, dir), "certificate")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := l.Addr().(*net.TCPAddr).Port
	l.Close()
	assert.ErrorContains(t, probeBackupServer(ctx, Peer{Host: "localhost", Port: closed}, dir), "connection refused")
}
