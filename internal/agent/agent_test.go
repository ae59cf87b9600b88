package agent

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/test/framework"
	"github.com/dbkeeper/dbkeeper/test/framework/postgres"
)

// The replication line is appended to pg_hba.conf once, whatever its
// spacing where it already is.
func TestReplicationHBAIsAppendedOnce(t *testing.T) {
	dir := t.TempDir()
	hba := filepath.Join(dir, hbaFile)
	require.NoError(t, os.WriteFile(hba, []byte("local all all trust\nhost all all all scram-sha-256"), 0o600))
	changed, err := ensureReplicationHBA(dir)
	require.NoError(t, err)
	assert.True(t, changed)
	changed, err = ensureReplicationHBA(dir)
	require.NoError(t, err)
	assert.False(t, changed)
	b, _ := os.ReadFile(hba)
	assert.Equal(t, 1, strings.Count(string(b), replicationHBA))
	assert.Equal(t, 1, strings.Count(string(b), rewindHBA), "pg_rewind connects to the postgres database")
	assert.True(t, strings.HasPrefix(string(b), "local all all trust\nhost all all all scram-sha-256\n"), "the existing lines are kept: %s", b)

	require.NoError(t, os.WriteFile(hba, []byte("host  replication\tdbkeeper_replication all   scram-sha-256\n"), 0o600))
	changed, err = ensureReplicationHBA(dir)
	require.NoError(t, err)
	assert.True(t, changed, "the rewind line is missing")
	b, _ = os.ReadFile(hba)
	assert.Equal(t, 0, strings.Count(string(b), replicationHBA), "the differently spaced replication line counts")
	assert.Equal(t, 1, strings.Count(string(b), rewindHBA))
	changed, err = ensureReplicationHBA(dir)
	require.NoError(t, err)
	assert.False(t, changed)
}

// The password file is private and escapes libpq's separators.
func TestPgpass(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	path, err := writePgpass(`a:b\c`)
	require.NoError(t, err)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	b, _ := os.ReadFile(path)
	assert.Equal(t, `*:*:*:dbkeeper_replication:a\:b\\c`+"\n", string(b))
}

// A standby streams from the primary host through its slot, named by its
// pod, verifying the primary's certificate when the Database has TLS, and
// starts its WAL receiver again after 1 s (not 5).
func TestStandbyArgs(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, writeStandbySignal(dir))
	a := &Agent{pgpass: "/tmp/p", cfg: Config{PGData: dir, Port: 5432, SocketDir: "/var/run/postgresql", PrimaryPort: 5432,
		Command: []string{"docker-entrypoint.sh", "postgres"}, Pod: "db-1", PrimaryHost: "db.ns.svc", TLSDir: "/tls"}}
	size, err := volumeSize(filepath.Dir(dir))
	require.NoError(t, err)
	keep := "max_slot_wal_keep_size=" + slotWALCap(size)
	assert.Equal(t, []string{"docker-entrypoint.sh", "postgres", "-c", "port=5432", "-c", "unix_socket_directories=/var/run/postgresql",
		"-c", keep,
		"-c", "primary_conninfo=host='db.ns.svc' port=5432 user=dbkeeper_replication passfile='/tmp/p' application_name='db-1' connect_timeout=5 tcp_user_timeout=5000 sslmode=verify-full sslrootcert='/tls/ca.crt'",
		"-c", "primary_slot_name=dbkeeper_db_1", "-c", "wal_retrieve_retry_interval=1s"}, a.serverArgs())
	a.cfg.TLSDir = ""
	assert.Contains(t, a.serverArgs()[9], "sslmode=prefer")
	require.NoError(t, os.Remove(filepath.Join(dir, standbyFile)))
	assert.Equal(t, []string{"docker-entrypoint.sh", "postgres", "-c", "port=5432", "-c", "unix_socket_directories=/var/run/postgresql",
		"-c", keep}, a.serverArgs(), "a primary gets no streaming settings")
}

// copy-self writes an executable copy of the running binary, atomically.
func TestCopySelf(t *testing.T) {
	dir := t.TempDir()
	dst, err := CopySelf(dir)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "manager"), dst)
	self, _ := os.Executable()
	want, _ := os.ReadFile(self)
	got, _ := os.ReadFile(dst)
	assert.True(t, bytes.Equal(want, got), "the copy differs from the binary")
	fi, _ := os.Stat(dst)
	assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm())
	entries, _ := os.ReadDir(dir)
	assert.Len(t, entries, 1, "a temporary file was left behind")
	_, err = CopySelf(filepath.Join(dir, "missing"))
	assert.Error(t, err)
}

// With a TLS directory the endpoint serves HTTPS with its certificate,
// and a certificate renewed in place is served without a restart; the
// same with the API's own directory when the server has no TLS
// (spec.tls.mode Disabled: before, the token travelled in clear). A plain
// HTTP request is refused.
func TestEndpointServesRenewedCertificate(t *testing.T) {
	for name, dirOf := range map[string]func(cfg *Config, dir string){
		"server TLS":   func(cfg *Config, dir string) { cfg.TLSDir = dir },
		"API TLS only": func(cfg *Config, dir string) { cfg.APITLSDir = dir },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeCert(t, dir, 1, time.Now().Add(-time.Hour))
			port, err := framework.FreePort()
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cfg := Config{Listen: "127.0.0.1:" + strconv.Itoa(port), PGData: t.TempDir(), Token: "tok"}
			dirOf(&cfg, dir)
			a := newAgent(ctx, cfg, logr.Discard())
			hs, err := a.listen()
			require.NoError(t, err)
			go func() { _ = a.serve(hs) }()
			defer hs.Close()

			serial := func() int64 {
				conn, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reads the certificate served
				require.NoError(t, err)
				defer conn.Close()
				return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
			}
			require.Eventually(t, func() bool {
				c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
				if err == nil {
					c.Close()
				}
				return err == nil
			}, 5*time.Second, 20*time.Millisecond)
			assert.EqualValues(t, 1, serial())
			writeCert(t, dir, 2, time.Now())
			assert.EqualValues(t, 2, serial(), "the renewed certificate is served")

			// and the token is still needed over HTTPS.
			hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // test
			resp, err := hc.Get("https://127.0.0.1:" + strconv.Itoa(port) + agentapi.StatusPath)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
			_, err = agentapi.Client{HTTP: hc, Token: "tok"}.Status(ctx, "https://127.0.0.1:"+strconv.Itoa(port))
			require.NoError(t, err)

			_, err = agentapi.Client{HTTP: &http.Client{}, Token: "tok"}.Status(ctx, "http://127.0.0.1:"+strconv.Itoa(port))
			require.Error(t, err, "the token was taken in clear")
			assert.Contains(t, err.Error(), "400")
		})
	}
}

func writeCert(t *testing.T, dir string, serial int64, mtime time.Time) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "db"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"db"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	for name, block := range map[string]*pem.Block{"tls.crt": {Type: "CERTIFICATE", Bytes: der}, "tls.key": {Type: "EC PRIVATE KEY", Bytes: kder}} {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(block), 0o600))
		require.NoError(t, os.Chtimes(p, mtime, mtime))
	}
}

// TestStandbyStartDropsPrimarySlots: a demoted primary starts as a standby
// without the slots it kept for its standbys (they would hold WAL on its
// volume and be stale when it is promoted again); other slots stay.
func TestStandbyStartDropsPrimarySlots(t *testing.T) {
	pgdata := t.TempDir()
	for _, slot := range []string{"dbkeeper_orders_1", "dbkeeper_orders_2", "users_slot"} {
		require.NoError(t, os.MkdirAll(filepath.Join(pgdata, "pg_replslot", slot), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(pgdata, "pg_replslot", slot, "state"), []byte("x"), 0o600))
	}
	dropped, err := dropStandbySlots(pgdata)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"dbkeeper_orders_1", "dbkeeper_orders_2"}, dropped)
	left, err := os.ReadDir(filepath.Join(pgdata, "pg_replslot"))
	require.NoError(t, err)
	require.Len(t, left, 1)
	assert.Equal(t, "users_slot", left[0].Name(), "a slot dbkeeper did not make is left alone")

	dropped, err = dropStandbySlots(t.TempDir())
	require.NoError(t, err, "a data directory without pg_replslot")
	assert.Empty(t, dropped)
}

// TestSlotWALCap: a quarter of the data volume, at least one WAL segment,
// and the size of a real filesystem is found.
func TestSlotWALCap(t *testing.T) {
	assert.Equal(t, "256MB", slotWALCap(1<<30))
	assert.Equal(t, "2560MB", slotWALCap(10<<30))
	assert.Equal(t, "16MB", slotWALCap(8<<20), "at least one segment")
	size, err := volumeSize(t.TempDir())
	require.NoError(t, err)
	assert.Positive(t, size)
}

// TestReplicationConnectionsGiveUpOnASilentPrimary: the replication
// role's connections give up on a primary address that drops their SYNs,
// as kube-proxy drops a connection to the read-write Service while no pod
// carries the primary label, after about connectTimeout: pg_rewind's
// (libpq's blocking connect: connect_timeout), and the WAL receiver's,
// whose asynchronous connect ignores connect_timeout (tcp_user_timeout
// bounds it in the kernel). Without them a standby's receiver waited for
// TCP's SYN back-off after the primary was labelled again: up to 31 s, and
// synchronous commits waited with it.
func TestReplicationConnectionsGiveUpOnASilentPrimary(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped under -short")
	}
	port := synDroppingPort(t)
	a := &Agent{pgpass: filepath.Join(t.TempDir(), "pgpass"), cfg: Config{Pod: "db-1", PrimaryHost: "127.0.0.1", PrimaryPort: port}}
	bound := 2 * connectTimeout

	ctx, cancel := context.WithTimeout(context.Background(), 4*connectTimeout)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, filepath.Join(mustBinDir(t), "psql"), "-X", "-w", "-d", a.sourceServer(), "-c", "SELECT 1").CombinedOutput()
	took := time.Since(start)
	require.Error(t, err, "pg_rewind's connection reached a primary that drops every SYN")
	assert.Less(t, took, bound, "pg_rewind's connection gave up after %s (%s)", took, strings.TrimSpace(string(out)))

	// a standby of its own whose primary_conninfo is the agent's
	var logPath string
	postgres.StartWith(t, postgres.Options{Prepare: func(dir string, uid, gid int) []string {
		logPath = filepath.Join(dir, "server.log")
		signal := filepath.Join(dir, "data", standbyFile)
		require.NoError(t, os.WriteFile(signal, nil, 0o600))
		require.NoError(t, os.Chown(signal, uid, gid))
		return []string{"-c", "primary_conninfo=" + a.primaryConninfo(), "-c", "wal_retrieve_retry_interval=1s"}
	}})
	started := time.Now()
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), "could not connect to the primary server")
	}, bound, 100*time.Millisecond, "the WAL receiver gave up on the silent primary within %s", bound)
	b, _ := os.ReadFile(logPath)
	t.Logf("the WAL receiver gave up within %s: %s", time.Since(started).Round(100*time.Millisecond),
		strings.TrimSpace(string(b[strings.Index(string(b), "could not connect"):])))
}

// synDroppingPort is a loopback port whose listener never accepts and
// whose queue is full: the kernel drops further SYNs, as a packet filter
// does.
func synDroppingPort(t *testing.T) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	t.Cleanup(func() { syscall.Close(fd) })
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	require.NoError(t, syscall.Listen(fd, 0))
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	port := sa.(*syscall.SockaddrInet4).Port
	for range 4 { // fill the queue
		c, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK, 0)
		require.NoError(t, err)
		t.Cleanup(func() { syscall.Close(c) })
		_ = syscall.Connect(c, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}})
	}
	time.Sleep(200 * time.Millisecond)
	return port
}

func mustBinDir(t *testing.T) string {
	t.Helper()
	bin, err := postgres.BinDir()
	require.NoError(t, err)
	return bin
}
