package agent_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/agent"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/test/framework"
	"github.com/dbkeeper/dbkeeper/test/framework/faults"
)

// databaseCert is a certificate of ca as the tls controller issues the
// Database's: common name the client Service's short name, serverAuth and
// clientAuth, here named localhost (the host by which the primary's
// pgBackRest reaches each standby's TLS server, at a port of its own) and
// 127.0.0.1 (the host standbys stream from).
func (ca *testCA) databaseCert(t *testing.T, serial int64, usages ...x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "orders"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"orders", "localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	if len(usages) > 0 {
		tmpl.ExtKeyUsage = usages
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// writeTLS writes cert as tls.crt and tls.key, and ca.crt, into dir as the
// mounted Secret holds them, owned by uid.
func (ca *testCA) writeTLS(t *testing.T, dir string, cert tls.Certificate, uid, gid int) {
	t.Helper()
	kder, err := x509.MarshalECPrivateKey(cert.PrivateKey.(*ecdsa.PrivateKey))
	require.NoError(t, err)
	files := map[string][]byte{
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}),
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

// writeClientTLS writes the Database's own CA and the instances' client
// certificate it signed into dir, as the pod's TLS volume holds them with
// a cert-manager issuer (agentapi.ClientCAFile, ClientCertFile,
// ClientKeyFile).
func (ca *testCA) writeClientTLS(t *testing.T, dir string, cert tls.Certificate, uid, gid int) {
	t.Helper()
	kder, err := x509.MarshalECPrivateKey(cert.PrivateKey.(*ecdsa.PrivateKey))
	require.NoError(t, err)
	for name, b := range map[string][]byte{
		agentapi.ClientCAFile:   ca.pem,
		agentapi.ClientCertFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}),
		agentapi.ClientKeyFile:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	} {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o600))
		require.NoError(t, os.Chown(p, uid, gid))
	}
}

// manifestOption is an option pgBackRest recorded in the manifest of the
// base backup label ("option-backup-standby"), read from the store's
// files.
func manifestOption(t *testing.T, f *archiveFixture, repoPath, label, option string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.store.Dir, "data", f.bucket, strings.TrimPrefix(repoPath, "/"), "backup", agentapi.Stanza, label, "backup.manifest"))
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, option+"="); ok {
			return v
		}
	}
	t.Fatalf("the manifest of %s has no %s", label, option)
	return ""
}

// TestBaseBackupFromAStreamingStandby: a primary and a streaming standby,
// both with the Database's certificate (serverAuth and clientAuth) and
// the Database's repository, each running pgBackRest's TLS server. A base
// backup asked of the primary's agent while a writer commits a row every
// few milliseconds completes with the writes going on, is named after the
// standby (BackupRun.Instance, which status.backup.lastBaseBackup takes),
// and pgBackRest's manifest says it was taken from the standby
// (option-backup-standby=true). The standby's TLS server refuses a client
// certificate of another CA. A new instance restored from that backup to
// the commit time of a row written after it has exactly the rows
// committed up to then. Then each backup is the primary's, named after
// it, with a note saying why: while the standby's TLS server is gone
// (killed: pgBackRest cannot check pg2), while the certificate renewed in
// place lacks clientAuth (the TLS servers restart with each renewal);
// renewed with clientAuth the standby's again; and with the standby
// stopped, no standby streams.
func TestBaseBackupFromAStreamingStandby(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, pgBackRest's TLS servers and an object store; skipped under -short")
	}
	ctx := context.Background()
	c := newCluster(t)
	ca := newTestCA(t)
	c.tlsDir = filepath.Join(c.dir, "tls")
	c.mkdir(c.tlsDir, 0o755)
	dbCert := ca.databaseCert(t, 1)
	ca.writeTLS(t, c.tlsDir, dbCert, c.uid, c.gid)
	hba := filepath.Join(c.dir, "pg_hba.conf")
	require.NoError(t, os.WriteFile(hba, []byte("local all all trust\n"+
		"hostssl replication "+agentapi.ReplicationUser+" 127.0.0.1/32 scram-sha-256\n"+
		"hostssl all all 127.0.0.1/32 scram-sha-256\n"), 0o644))
	c.serverArgs = []string{"-c", "ssl=on", "-c", "ssl_cert_file=" + c.tlsDir + "/tls.crt", "-c", "ssl_key_file=" + c.tlsDir + "/tls.key",
		"-c", "hba_file=" + hba, "-c", "track_commit_timestamp=on"}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	c.client.HTTP = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	f := newArchiveFixture(t, c)
	const repoPath = "/dbkeeper/shop/orders/uid-1"
	env := f.env(t, repoPath)

	// each instance's TLS server on a port of its own; the primary reaches
	// the standby's as localhost, with the standby's paths.
	serverPort := map[string]int{}
	c.agentArgs = map[string][]string{}
	for _, name := range []string{"db-0", "db-1"} {
		p, err := framework.FreePort()
		require.NoError(t, err)
		serverPort[name] = p
		c.agentArgs[name] = []string{"--pgbackrest-port=" + strconv.Itoa(p)}
	}
	b := c.start("db-1", env)
	peers, err := json.Marshal(map[string]agent.Peer{"db-1": {Host: "localhost", Port: serverPort["db-1"],
		PGData: b.pgdata, SocketDir: filepath.Join(b.dir, "run"), PGPort: b.port}})
	require.NoError(t, err)
	c.agentArgs["db-0"] = append(c.agentArgs["db-0"], "--peers="+string(peers))
	a := c.start("db-0", env)

	_, err = c.client.Bootstrap(ctx, a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	c.waitStatus(a, 2*time.Minute, "a primary with its repository ready", func(s agentapi.Status) bool {
		return runningAs(agentapi.RolePrimary)(s) && s.Archive != nil && s.Archive.StanzaReady
	})
	pa := sql(t, a)
	mustExec(t, pa, fmt.Sprintf("CREATE ROLE %s WITH LOGIN REPLICATION PASSWORD '%s'", agentapi.ReplicationUser, strings.ReplaceAll(replPassword, "'", "''")))
	mustExec(t, pa, "SELECT pg_create_physical_replication_slot($1)", agentapi.SlotName(b.name))
	mustExec(t, pa, "CREATE TABLE ledger (id serial PRIMARY KEY, filler text)")
	c.proxy.target.Store(int32(a.port))
	_, err = c.client.Bootstrap(ctx, b.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapClone})
	require.NoError(t, err)
	c.waitStatus(b, 2*time.Minute, "a streaming standby", func(s agentapi.Status) bool {
		return runningAs(agentapi.RoleReplica)(s) && s.WALReceiver == "streaming"
	})

	// the standby's TLS server: a client certificate of another CA is
	// refused; the Database's is let through the handshake.
	other := newTestCA(t).databaseCert(t, 7)
	standbyServer := net.JoinHostPort("localhost", strconv.Itoa(serverPort["db-1"]))
	assert.ErrorContains(t, tlsFirstRead(t, standbyServer, pool, other), "unknown certificate authority",
		"the standby's TLS server let in a client certificate of another CA")
	if err := tlsFirstRead(t, standbyServer, pool, dbCert); err != nil {
		var ne net.Error
		assert.True(t, errors.As(err, &ne) && ne.Timeout(), "the Database's own certificate is refused: %v", err)
	}

	// a writer commits a row every few milliseconds through the backup.
	var written atomic.Int64
	stop, stopped := make(chan struct{}), make(chan error, 1)
	wconn := sql(t, a)
	go func(stop <-chan struct{}) {
		for {
			select {
			case <-stop:
				stopped <- nil
				return
			case <-time.After(3 * time.Millisecond):
			}
			if _, err := wconn.Exec(ctx, "INSERT INTO ledger (filler) VALUES (repeat('x', 200))"); err != nil {
				stopped <- err
				return
			}
			written.Add(1)
		}
	}(stop)
	stopWriter := func() {
		if stop == nil {
			return
		}
		close(stop)
		stop = nil
		require.NoError(t, <-stopped, "a write failed")
	}
	t.Cleanup(func() {
		if stop != nil {
			close(stop)
			<-stopped
		}
	})
	waitFor(t, func() bool { return written.Load() >= 100 }, 30*time.Second, "the writer's first 100 rows")

	run, err := c.client.Backup(ctx, a.url, agentapi.BackupRequest{ID: "b1", Type: "full"})
	require.NoError(t, err)
	before := written.Load()
	s := c.waitBaseBackups(a, 1)
	during := written.Load() - before
	bk := s.Archive.Backups[0]
	t.Logf("backup %s from %s in %s, %d rows committed meanwhile; note %q", bk.Label, s.Archive.Run.Instance,
		s.Archive.Run.Finished.Sub(run.Started.Time).Round(time.Millisecond), during, s.Archive.Run.Note)
	assert.Equal(t, "db-1", s.Archive.Run.Instance, "the backup does not name the standby: %s", s.Archive.Run.Note)
	assert.Equal(t, "taken from standby db-1", s.Archive.Run.Note)
	assert.Positive(t, during, "no row was committed during the backup")
	assert.Equal(t, "true", manifestOption(t, f, repoPath, bk.Label, "option-backup-standby"),
		"pgBackRest did not record a backup from the standby")

	// rows after the backup, the target among them.
	time.Sleep(time.Until(bk.Finished.Add(time.Second)) + 100*time.Millisecond)
	n := written.Load()
	waitFor(t, func() bool { return written.Load() >= n+50 }, 30*time.Second, "50 more rows")
	var targetID int
	var target time.Time
	require.NoError(t, pa.QueryRow(ctx, "SELECT id, pg_xact_commit_timestamp(xmin) FROM ledger ORDER BY id DESC LIMIT 1").Scan(&targetID, &target))
	n = written.Load()
	waitFor(t, func() bool { return written.Load() >= n+50 }, 30*time.Second, "50 rows after the target")
	stopWriter()
	want := count(t, pa, "SELECT count(*) FROM ledger WHERE pg_xact_commit_timestamp(xmin) <= $1", target)
	require.Equal(t, targetID, want, "the ledger's ids are not in commit order")
	require.Greater(t, count(t, pa, "SELECT count(*) FROM ledger"), want)
	segment := stringQuery(t, pa, "SELECT pg_walfile_name(pg_switch_wal())")
	c.waitStatus(a, 2*time.Minute, "segment "+segment+" archived", func(s agentapi.Status) bool {
		return s.Archive != nil && s.Archive.LastArchivedWAL >= segment
	})

	// the point-in-time restore of the standby's backup.
	r := c.start("db-2")
	_, err = c.client.Bootstrap(ctx, r.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapRestore,
		Recovery: f.recoverySource(repoPath, agentapi.RecoveryTarget{Time: target.Format(time.RFC3339Nano)})})
	require.NoError(t, err)
	c.waitStatus(r, 3*time.Minute, "recovered and promoted", runningAs(agentapi.RolePrimary))
	pr := sql(t, r)
	assert.Equal(t, want, count(t, pr, "SELECT count(*) FROM ledger"), "rows committed at or before the target")
	assert.Equal(t, targetID, count(t, pr, "SELECT max(id) FROM ledger"), "a row committed after the target")
	t.Logf("restored to %s: %d rows", target.Format(time.RFC3339Nano), want)

	// the standby's TLS server is gone (killed; the agent starts it again
	// after a back-off of 5 s): the backup is the primary's at once
	// (pgBackRest itself would retry the refused connection for two
	// io-timeouts, 2 minutes).
	var killed []int
	for _, p := range faults.Descendants(b.cmd.Process.Pid) {
		if args := strings.Fields(faults.Cmdline(p)); len(args) > 0 && filepath.Base(args[0]) == "pgbackrest" && args[len(args)-1] == "server" {
			require.NoError(t, syscall.Kill(p, syscall.SIGKILL))
			killed = append(killed, p)
		}
	}
	require.Len(t, killed, 1, "the standby's agent runs one pgBackRest TLS server")
	_, err = c.client.Backup(ctx, a.url, agentapi.BackupRequest{ID: "b2", Type: "incr"})
	require.NoError(t, err)
	s = c.waitBaseBackups(a, 2)
	t.Logf("with the standby's server gone: %s, note %q", s.Archive.Run.Instance, s.Archive.Run.Note)
	assert.Equal(t, "db-0", s.Archive.Run.Instance)
	assert.Contains(t, s.Archive.Run.Note, "taken from the primary: the TLS server of standby db-1 cannot be used")
	assert.Contains(t, s.Archive.Run.Note, "connection refused")
	assert.Equal(t, "false", manifestOption(t, f, repoPath, s.Archive.Backups[1].Label, "option-backup-standby"))

	// a certificate without clientAuth (as dbkeeper issued before) renewed
	// in place: the TLS servers restart with it, and backups are the
	// primary's; renewed again with clientAuth, the standby's.
	ca.writeTLS(t, c.tlsDir, ca.databaseCert(t, 2, x509.ExtKeyUsageServerAuth), c.uid, c.gid)
	waitFor(t, func() bool { return servedBy(standbyServer, pool) == 2 }, 40*time.Second, "the standby's TLS server serving the renewed certificate")
	_, err = c.client.Backup(ctx, a.url, agentapi.BackupRequest{ID: "b3", Type: "incr"})
	require.NoError(t, err)
	s = c.waitBaseBackups(a, 3)
	assert.Equal(t, "db-0", s.Archive.Run.Instance)
	assert.Contains(t, s.Archive.Run.Note, "is not usable by a TLS client")
	dbCert = ca.databaseCert(t, 3)
	ca.writeTLS(t, c.tlsDir, dbCert, c.uid, c.gid)
	waitFor(t, func() bool { return servedBy(standbyServer, pool) == 3 }, 40*time.Second, "the standby's TLS server serving the certificate renewed again")
	_, err = c.client.Backup(ctx, a.url, agentapi.BackupRequest{ID: "b4", Type: "incr"})
	require.NoError(t, err)
	s = c.waitBaseBackups(a, 4)
	assert.Equal(t, "db-1", s.Archive.Run.Instance, "note %q", s.Archive.Run.Note)
	assert.Equal(t, "true", manifestOption(t, f, repoPath, s.Archive.Backups[3].Label, "option-backup-standby"))

	// the standby stops: the next backup is the primary's.
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-b.exited:
	case <-time.After(time.Minute):
		t.Fatal("the standby's agent did not stop")
	}
	waitFor(t, func() bool {
		return count(t, pa, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'") == 0
	}, 30*time.Second, "no standby streaming")
	_, err = c.client.Backup(ctx, a.url, agentapi.BackupRequest{ID: "b5", Type: "incr"})
	require.NoError(t, err)
	s = c.waitBaseBackups(a, 5)
	assert.Equal(t, "db-0", s.Archive.Run.Instance)
	assert.Contains(t, s.Archive.Run.Note, "no standby streams")
	assert.Equal(t, "false", manifestOption(t, f, repoPath, s.Archive.Backups[4].Label, "option-backup-standby"))
}

// servedBy is the serial of the certificate the TLS server at addr
// presents (verified with pool), 0 when it cannot be reached.
func servedBy(addr string, pool *x509.CertPool) int64 {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost"})
	if err != nil {
		return 0
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// tlsFirstRead connects to addr presenting cert, verifying the server
// with pool, and reads: a server that refuses the certificate says so in
// an alert, which the first read returns (TLS 1.3 clients finish their
// handshake first); nil or a timeout when the server said nothing.
func tlsFirstRead(t *testing.T, addr string, pool *x509.CertPool, cert tls.Certificate) error {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{RootCAs: pool, ServerName: "localhost", Certificates: []tls.Certificate{cert}})
	if err != nil {
		return err
	}
	defer conn.Close()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(2*time.Second)))
	_, err = conn.Read(make([]byte, 64))
	return err
}
