// Package postgres starts a throwaway PostgreSQL server for a test, from the
// binaries of Debian's postgresql package (installed by .ci/run): a fresh
// data directory, password (SCRAM) authentication, listening on 127.0.0.1
// only, stopped when the test ends and killed with the test process.
package postgres

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/test/framework"
)

// Superuser is the server's superuser; its password is Server.Password.
const Superuser = "postgres"

// Server is one running PostgreSQL server.
type Server struct {
	// Port is the TCP port on 127.0.0.1.
	Port int
	// Password is the superuser's password.
	Password string
	// Bin is the directory of the server and client binaries.
	Bin string
	// logPath is the server's output (stderr logging).
	logPath string
	// socketDir is the server's unix socket directory.
	socketDir string
}

// Log is what the server has logged so far.
func (s *Server) Log() string {
	data, _ := os.ReadFile(s.logPath)
	return string(data)
}

// BinDir finds the binaries of the newest installed PostgreSQL.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("no PostgreSQL server binaries under /usr/lib/postgresql: install them with `apt-get install postgresql` (.ci/run does)")
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// Options change how StartWith runs the server.
type Options struct {
	// Prepare runs before the server starts, with the server's scratch
	// directory and the uid and gid the server runs as (to own the files
	// it writes there), and returns more server arguments (-c name=value).
	Prepare func(dir string, uid, gid int) []string
}

// Start starts a server for the test.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith starts a server for the test, prepared as o says.
func StartWith(t testing.TB, o Options) *Server {
	t.Helper()
	bin, err := BinDir()
	require.NoError(t, err)
	dir, err := os.MkdirTemp("", "dbkeeper-pg-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))

	// PostgreSQL refuses to run as root: when the tests do, the server runs
	// as the package's postgres user.
	var cred *syscall.Credential
	uid, gid := os.Geteuid(), os.Getegid()
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		require.NoError(t, err, "running as root needs the postgres user of the postgresql package")
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		require.NoError(t, os.Chown(dir, uid, gid))
	}
	s := &Server{Bin: bin, Password: "pg-" + strconv.FormatInt(time.Now().UnixNano(), 36), socketDir: dir}
	pwfile := filepath.Join(dir, "pwfile")
	require.NoError(t, os.WriteFile(pwfile, []byte(s.Password+"\n"), 0o644))
	data := filepath.Join(dir, "data")

	initdb := exec.Command(filepath.Join(bin, "initdb"), "--pgdata="+data, "--username="+Superuser,
		"--auth=scram-sha-256", "--pwfile="+pwfile, "--encoding=UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := initdb.CombinedOutput()
	require.NoError(t, err, "initdb: %s", out)

	s.Port, err = framework.FreePort()
	require.NoError(t, err)
	logPath := filepath.Join(dir, "server.log")
	s.logPath = logPath
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	defer logFile.Close()
	serverLog := func() string { data, _ := os.ReadFile(logPath); return string(data) }
	args := []string{"-D", data, "-c", "listen_addresses=127.0.0.1", "-p", strconv.Itoa(s.Port), "-k", dir, "-c", "fsync=off"}
	if o.Prepare != nil {
		args = append(args, o.Prepare(dir, uid, gid)...)
	}
	server := exec.Command(filepath.Join(bin, "postgres"), args...)
	server.Stdout, server.Stderr = logFile, logFile
	server.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	require.NoError(t, server.Start())
	exited := make(chan struct{})
	go func() { _ = server.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = server.Process.Signal(syscall.SIGINT) // fast shutdown
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = server.Process.Kill()
			<-exited
		}
	})

	deadline := time.Now().Add(30 * time.Second)
	for {
		ready := exec.Command(filepath.Join(bin, "pg_isready"), "-h", "127.0.0.1", "-p", strconv.Itoa(s.Port))
		if ready.Run() == nil {
			break
		}
		select {
		case <-exited:
			t.Fatalf("postgres exited: %s", serverLog())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("postgres not ready after 30s: %s", serverLog())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return s
}

// Env is the libpq environment for connecting as user with password.
func (s *Server) Env(user, password string) []string {
	return []string{"PGHOST=127.0.0.1", "PGPORT=" + strconv.Itoa(s.Port), "PGUSER=" + user, "PGPASSWORD=" + password}
}

// SQL runs statements as the superuser in database db, over the unix
// socket (a server may refuse the superuser's password over TCP), and
// returns psql's unaligned, tuples-only output.
func (s *Server) SQL(t testing.TB, db, sql string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(s.Bin, "psql"), "--no-psqlrc", "--set=ON_ERROR_STOP=1", "-At", "-d", db, "-c", sql)
	cmd.Env = append(os.Environ(), s.Env(Superuser, s.Password)...)
	cmd.Env = append(cmd.Env, "PGHOST="+s.socketDir)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "psql %q: %s", sql, out)
	return string(bytes.TrimSpace(out))
}
