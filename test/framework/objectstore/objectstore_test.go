package objectstore

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/test/framework/postgres"
)

// requireRealNodeEnv is cluster.RequireRealNodeEnv (not imported: this
// package's tests need no cluster): set to 1 (CI), a missing pgBackRest or
// PostgreSQL fails the round trip instead of skipping it, as the real
// node's pods run pgBackRest against this store.
const requireRealNodeEnv = "DBKEEPER_REQUIRE_REAL_NODE"

func startStore(t *testing.T) *Store {
	t.Helper()
	s, err := Start(t.Context(), Options{})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			log := s.Log()
			t.Logf("versitygw log (%s), the end:\n%s", s.LogPath(), log[max(0, len(log)-4000):])
		}
		require.NoError(t, s.Stop())
	})
	return s
}

// get GETs https://addr/ verified with the store's CA (as serverName when
// set, else as addr's IP) and returns the status code.
func get(s *Store, addr, serverName string, timeout time.Duration) (int, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.CA)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: serverName}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Timeout: timeout, Transport: tr}).Get("https://" + addr + "/")
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func TestStore(t *testing.T) {
	s := startStore(t)
	ctx := t.Context()
	require.Equal(t, s.Endpoint, s.Local)
	require.Equal(t, "us-east-1", s.Region)

	// anonymous requests are refused, over TLS verified by IP and by name
	for _, name := range []string{"", DNSName, "localhost"} {
		code, err := get(s, s.Endpoint, name, 5*time.Second)
		require.NoError(t, err, "server name %q", name)
		require.Equal(t, http.StatusForbidden, code)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(s.Dir, "tls.crt"), filepath.Join(s.Dir, "tls.key"))
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	require.NoError(t, err)
	require.ElementsMatch(t, []string{DNSName, "localhost", "127.0.0.1"}, leaf.DNSNames, "pgBackRest matches DNS SANs only")

	require.NoError(t, s.CreateBucket(ctx, "probe"))
	require.Error(t, s.CreateBucket(ctx, "probe"))
	require.Error(t, s.CreateBucket(ctx, "../probe"))
	keys, err := s.List(ctx, "probe", "")
	require.NoError(t, err)
	require.Empty(t, keys)

	// objects are files under data/<bucket>/
	obj := filepath.Join(s.Dir, "data", "probe", "a", "b.txt")
	require.NoError(t, os.MkdirAll(filepath.Dir(obj), 0o755))
	require.NoError(t, os.WriteFile(obj, []byte("hello"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(s.Dir, "data", "probe", "c"), nil, 0o644))
	keys, err = s.List(ctx, "probe", "a/")
	require.NoError(t, err)
	require.Equal(t, []string{"a/b.txt"}, keys)
	require.NoError(t, s.Corrupt(ctx, "probe", "a/b.txt"))
	data, err := os.ReadFile(obj)
	require.NoError(t, err)
	require.Len(t, data, 5)
	require.NotEqual(t, "hello", string(data))
	require.Error(t, s.Corrupt(ctx, "probe", "../../ca.crt"))
	require.Error(t, s.Corrupt(ctx, "probe", "c"), "an empty object cannot change")

	// paused, the store accepts connections but answers nothing
	require.NoError(t, s.Pause())
	_, err = get(s, s.Endpoint, "", time.Second)
	require.Error(t, err)
	require.NoError(t, s.Resume())
	code, err := get(s, s.Endpoint, "", 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, code)

	// Stop removes the directory it created; a second Stop is a no-op
	require.NoError(t, s.Stop())
	_, err = os.Stat(s.Dir)
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = get(s, s.Endpoint, "", time.Second)
	require.Error(t, err)
}

// TestPgBackRestRoundTrip archives WAL and takes a full backup of a local
// PostgreSQL into the store with pgBackRest, then finds a corrupted backup
// file with pgbackrest verify.
func TestPgBackRestRoundTrip(t *testing.T) {
	requireBackupTools(t)
	s := startStore(t)
	ctx := t.Context()
	const bucket = "dbkeeper"
	require.NoError(t, s.CreateBucket(ctx, bucket))

	var pgDir string
	var uid, gid int
	pg := postgres.StartWith(t, postgres.Options{Prepare: func(dir string, u, g int) []string {
		pgDir, uid, gid = dir, u, g
		return []string{"-c", "wal_level=replica", "-c", "archive_mode=on",
			"-c", "archive_command=pgbackrest --config=" + filepath.Join(dir, "pgbackrest.conf") + " --stanza=db archive-push %p"}
	}})
	host, port, err := net.SplitHostPort(s.Local)
	require.NoError(t, err)
	state := filepath.Join(pgDir, "pgbackrest")
	require.NoError(t, os.Mkdir(state, 0o700))
	require.NoError(t, os.Chown(state, uid, gid))
	// The options the operator gives a pod, but for the address: there
	// repo1-s3-endpoint is the bridge's 198.18.0.1 (see the package doc).
	conf := strings.Join([]string{
		"[global]",
		"repo1-type=s3",
		"repo1-s3-endpoint=" + host,
		"repo1-storage-port=" + port,
		"repo1-storage-ca-file=" + s.CAFile,
		"repo1-s3-uri-style=path",
		"repo1-s3-region=" + s.Region,
		"repo1-s3-bucket=" + bucket,
		"repo1-s3-key=" + s.AccessKey,
		"repo1-s3-key-secret=" + s.SecretKey,
		"repo1-path=/pg",
		"repo1-retention-full=2",
		"start-fast=y",
		"lock-path=" + state,
		"log-path=" + state,
		"log-level-file=off",
		"",
		"[db]",
		"pg1-path=" + pg.SQL(t, "postgres", "SHOW data_directory"),
		"pg1-port=" + strconv.Itoa(pg.Port),
		"pg1-socket-path=" + pgDir,
		"pg1-user=" + postgres.Superuser,
	}, "\n") + "\n"
	confPath := filepath.Join(pgDir, "pgbackrest.conf")
	require.NoError(t, os.WriteFile(confPath, []byte(conf), 0o600))
	require.NoError(t, os.Chown(confPath, uid, gid))

	pgbackrest := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "pgbackrest", append([]string{"--config=" + confPath, "--stanza=db"}, args...)...)
		cmd.Env = append(os.Environ(), "PGPASSWORD="+pg.Password)
		if os.Geteuid() == 0 { // as the server's user, like its archive_command
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "pgbackrest %s: %s", strings.Join(args, " "), out)
		return string(out)
	}
	pgbackrest("stanza-create")
	pgbackrest("check") // archives a segment through archive_command
	pgbackrest("backup", "--type=full")

	var info []struct {
		Status struct{ Code int }
		Backup []struct {
			Label string
			Type  string
		}
	}
	require.NoError(t, json.Unmarshal([]byte(pgbackrest("info", "--output=json")), &info))
	require.Len(t, info, 1)
	require.Zero(t, info[0].Status.Code)
	require.Len(t, info[0].Backup, 1)
	require.Equal(t, "full", info[0].Backup[0].Type)

	wal, err := s.List(ctx, bucket, "pg/archive/db/")
	require.NoError(t, err)
	require.NotEmpty(t, wal)
	backupDir := "pg/backup/db/" + info[0].Backup[0].Label + "/"
	files, err := s.List(ctx, bucket, backupDir)
	require.NoError(t, err)
	require.Contains(t, files, backupDir+"backup.manifest")

	out := pgbackrest("verify", "--output=text", "--verbose")
	require.Contains(t, out, "status: ok", out)
	require.NoError(t, s.Corrupt(ctx, bucket, backupDir+"pg_data/global/pg_control.gz"))
	// verify exits 0 when it finds corruption: the text says it
	out = pgbackrest("verify", "--output=text", "--verbose")
	require.Contains(t, out, "status: error", out)
	require.Contains(t, out, "checksum invalid: 1", out)
}

// requireBackupTools skips the test when pgBackRest or PostgreSQL's server
// binaries are missing, or fails it when requireRealNodeEnv=1.
func requireBackupTools(t *testing.T) {
	t.Helper()
	var missing []string
	if _, err := exec.LookPath("pgbackrest"); err != nil {
		missing = append(missing, "pgbackrest (apt-get install pgbackrest)")
	}
	if _, err := postgres.BinDir(); err != nil {
		missing = append(missing, err.Error())
	} else if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			missing = append(missing, "the postgres user, to run PostgreSQL as root")
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("no pgBackRest round trip: missing %s", strings.Join(missing, "; "))
	if os.Getenv(requireRealNodeEnv) == "1" {
		t.Fatalf("%s=1 but %s", requireRealNodeEnv, msg)
	}
	t.Skip(msg)
}
