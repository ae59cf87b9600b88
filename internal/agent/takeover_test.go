package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
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
)

func sumOf(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// A received binary is kept only with the SHA-256 it was sent with.
func TestBinaryStageReceive(t *testing.T) {
	s := binaryStage{current: filepath.Join(t.TempDir(), "manager")}
	body := []byte("#!/bin/sh\nexit 0\n")
	err := s.receive(bytes.NewReader(body), strings.Repeat("ab", 32))
	assert.ErrorContains(t, err, "incomplete or altered")
	assert.NoFileExists(t, s.newPath(), "a bad sum leaves nothing")

	require.NoError(t, s.receive(bytes.NewReader(body), strings.ToUpper(sumOf(body))))
	fi, err := os.Stat(s.newPath())
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm())
	s.discard()
	assert.NoFileExists(t, s.newPath())
}

// install and rollback swap the binaries by renames.
func TestBinaryStageInstallAndRollback(t *testing.T) {
	s := binaryStage{current: filepath.Join(t.TempDir(), "manager")}
	require.NoError(t, os.WriteFile(s.current, []byte("old"), 0o755))
	require.NoError(t, os.WriteFile(s.newPath(), []byte("new"), 0o755))
	require.NoError(t, s.install())
	assert.Equal(t, "new", readString(t, s.current))
	assert.Equal(t, "old", readString(t, s.oldPath()))
	assert.NoFileExists(t, s.newPath())
	require.NoError(t, s.rollback())
	assert.Equal(t, "old", readString(t, s.current))
	assert.NoFileExists(t, s.oldPath())
}

// The check runs the new binary with the agent's words and
// --check-takeover first, and wants the version it was sent as.
func TestBinaryStageCheck(t *testing.T) {
	s := binaryStage{current: filepath.Join(t.TempDir(), "manager")}
	script := "#!/bin/sh\necho \"$@\" >&2\n" + `echo '{"version":"v2","level":1}'` + "\n"
	require.NoError(t, os.WriteFile(s.newPath(), []byte(script), 0o755))
	info, err := s.check(t.Context(), []string{"agent"}, []string{"--port=5", "--", "postgres"}, nil, "v2")
	require.NoError(t, err)
	assert.Equal(t, agentapi.BuildInfo{Version: "v2", Level: 1}, info)
	_, err = s.check(t.Context(), []string{"agent"}, nil, nil, "v3")
	assert.ErrorContains(t, err, `says it is version "v2", not "v3"`)

	require.NoError(t, os.WriteFile(s.newPath(), []byte("#!/bin/sh\necho \"no: $1 $2\" >&2\nexit 2\n"), 0o755))
	_, err = s.check(t.Context(), []string{"agent"}, []string{"--port=5"}, nil, "v2")
	assert.ErrorContains(t, err, "no: agent --check-takeover")
}

func TestCheckArgsAndWithEnv(t *testing.T) {
	assert.Equal(t, []string{"agent", "--check-takeover", "--port=1", "--", "pg"}, checkArgs([]string{"agent"}, []string{"--port=1", "--", "pg"}))
	assert.Equal(t, []string{"--check-takeover"}, checkArgs(nil, nil))
	assert.Equal(t, []string{"A=1", "C=3", "B=2"}, withEnv([]string{"A=1", "B=0", "C=3", "B=1"}, "B", "2"))
}

// A handover file says a server's pid and its two output fds.
func TestReadHandover(t *testing.T) {
	path := filepath.Join(t.TempDir(), handoverFile)
	h := handover{PID: 42, Output: []int{3, 4}, State: agentapi.StateRunning, From: "v1", At: time.Now().UTC().Truncate(time.Second),
		Lease: &handoverLease{ResourceVersion: "7", LastRenew: time.Now().UTC().Truncate(time.Second)}}
	require.NoError(t, writeHandover(path, h))
	got, err := readHandover(path)
	require.NoError(t, err)
	assert.Equal(t, h, got)
	require.NoError(t, os.WriteFile(path, []byte(`{"pid":1,"output":[3]}`), 0o600))
	_, err = readHandover(path)
	assert.ErrorContains(t, err, "no server's pid and output")
	assert.Equal(t, filepath.Join(filepath.Dir(path), handoverFailedFile), failedMarker(path))
}

// Only the agent's child that is the data directory's postmaster, of the
// role the handover says, is adopted.
func TestCheckAdoptable(t *testing.T) {
	pgdata := t.TempDir()
	child := exec.Command("sleep", "30")
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	pid := child.Process.Pid
	h := handover{PID: pid, Output: []int{3, 4}}
	assert.ErrorContains(t, checkAdoptable(h, pgdata, os.Getpid()), "not the data directory's postmaster")
	require.NoError(t, os.WriteFile(filepath.Join(pgdata, "postmaster.pid"), []byte(strconv.Itoa(pid)+"\n"+pgdata+"\n"), 0o600))
	assert.NoError(t, checkAdoptable(h, pgdata, os.Getpid()))
	h.Standby = true
	assert.ErrorContains(t, checkAdoptable(h, pgdata, os.Getpid()), "role changed")
	h.Standby = false
	assert.ErrorContains(t, checkAdoptable(h, pgdata, os.Getpid()+1), "is not the agent's child")
	h.PID = 1 << 30
	assert.ErrorContains(t, checkAdoptable(h, pgdata, os.Getpid()), "reading process")
}

// Only pipes are taken as the server's output.
func TestHandedFiles(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "not-a-pipe")
	require.NoError(t, err)
	defer f.Close()
	fds, err := fdsOf([]*os.File{f})
	require.NoError(t, err)
	_, err = handedFiles(fds)
	assert.ErrorContains(t, err, "is not a pipe")
}

// An exec that fails puts the former binary back, closes the passed fds
// on exec again, removes the handover and gives the op lock back; while
// it ran, the handover named the server and its fds were passed open.
func TestHandOverThatCannotExecResumes(t *testing.T) {
	dir := t.TempDir()
	stage := binaryStage{current: filepath.Join(dir, "manager")}
	require.NoError(t, os.WriteFile(stage.current, []byte("new"), 0o755))
	require.NoError(t, os.WriteFile(stage.oldPath(), []byte("old"), 0o755))
	var readers []*os.File
	for range 2 {
		r, w, err := os.Pipe()
		require.NoError(t, err)
		t.Cleanup(func() { r.Close(); w.Close() })
		readers = append(readers, r)
	}
	self, err := os.FindProcess(os.Getpid())
	require.NoError(t, err)
	a := &Agent{ctx: t.Context(), cfg: Config{PGData: filepath.Join(dir, "data")}, log: logr.Discard(), self: stage.current, state: agentapi.StateRunning,
		srv: &server{cmd: &exec.Cmd{Process: self}, output: &outputTail{readers: readers}, accepted: true}}
	var seen handover
	var env []string
	var cloexec []bool
	a.execve = func(path string, argv, envv []string) error {
		assert.Equal(t, stage.current, path)
		env = envv
		var err error
		seen, err = readHandover(filepath.Join(dir, handoverFile))
		assert.NoError(t, err)
		for _, fd := range seen.Output {
			flags, _, _ := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
			cloexec = append(cloexec, flags&syscall.FD_CLOEXEC != 0)
		}
		return syscall.ENOEXEC
	}
	a.op.Lock()
	err = a.handOver(takeover{stage: stage, version: "v2"})
	assert.ErrorContains(t, err, "executing the new binary")
	assert.Equal(t, os.Getpid(), seen.PID)
	assert.True(t, seen.Accepted)
	assert.Equal(t, []bool{false, false}, cloexec, "passed open")
	assert.Contains(t, env, agentapi.EnvHandover+"="+filepath.Join(dir, handoverFile))
	fds, err := fdsOf(readers)
	require.NoError(t, err)
	assert.Equal(t, fds, seen.Output)
	for _, fd := range fds {
		flags, _, _ := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
		assert.NotZero(t, flags&syscall.FD_CLOEXEC, "closed on exec again")
	}
	assert.Equal(t, "old", readString(t, stage.current), "the former binary back")
	assert.NoFileExists(t, stage.oldPath())
	assert.NoFileExists(t, filepath.Join(dir, handoverFile))
	assert.True(t, a.op.TryLock(), "the op lock given back")
	require.NotNil(t, a.lastTakeover)
	assert.Contains(t, a.lastTakeover.Message, "the switch to v2 failed")
}

// The new agent holds the lease as of the former one's last renew.
func TestContinueHolding(t *testing.T) {
	k := &leaseKeeper{now: time.Now}
	assert.Nil(t, k.handover())
	k.continueHolding(&handoverLease{LastRenew: time.Now().Add(-3 * time.Second)})
	assert.True(t, k.holding)
	assert.InDelta(t, 3*time.Second, time.Since(k.lastRenew), float64(500*time.Millisecond))
	l := k.handover()
	require.NotNil(t, l)
	assert.Equal(t, k.lastRenew, l.LastRenew)
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// handleBinaryFixture is an agent whose "server" is the test process
// (postmaster.pid says so), running, with its binary in a directory of
// its own.
func handleBinaryFixture(t *testing.T) (*Agent, binaryStage) {
	t.Helper()
	dir := t.TempDir()
	pgdata := filepath.Join(dir, "data")
	require.NoError(t, os.Mkdir(pgdata, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(pgdata, "postmaster.pid"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600))
	stage := binaryStage{current: filepath.Join(dir, "manager")}
	require.NoError(t, os.WriteFile(stage.current, []byte("old"), 0o755))
	self, err := os.FindProcess(os.Getpid())
	require.NoError(t, err)
	a := newAgent(t.Context(), Config{PGData: pgdata, Token: "tok", Args: []string{"--port=1"}}, logr.Discard())
	a.self = stage.current
	a.srv = &server{cmd: &exec.Cmd{Process: self}, accepted: true}
	a.state = agentapi.StateRunning
	return a, stage
}

// putBinary sends body to a's endpoint handler as version, with its sum
// unless sum is set, and the token.
func putBinary(a *Agent, body, version, sum string) *httptest.ResponseRecorder {
	if sum == "" {
		sum = sumOf([]byte(body))
	}
	req := httptest.NewRequest(http.MethodPut, agentapi.BinaryPath, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer tok")
	req.Header.Set(agentapi.HeaderVersion, version)
	req.Header.Set(agentapi.HeaderSHA256, sum)
	rec := httptest.NewRecorder()
	a.authenticated(a.handleBinary).ServeHTTP(rec, req)
	return rec
}

// The endpoint: headers required; refused (409, nothing changed) while
// the server does not run, while another operation holds the agent, for
// a bad sum; accepted (202) once the binary is checked and installed,
// handing Main the switch.
func TestHandleBinary(t *testing.T) {
	script := "#!/bin/sh\n" + `echo '{"version":"v2","level":1}'` + "\n"
	a, stage := handleBinaryFixture(t)

	rec := putBinary(a, script, "", "")
	assert.Equal(t, http.StatusBadRequest, rec.Code)

	a.state = agentapi.StateStarting
	rec = putBinary(a, script, "v2", "")
	assert.Equal(t, http.StatusConflict, rec.Code)
	assert.Contains(t, rec.Body.String(), "the server is not running")
	a.state = agentapi.StateRunning

	rec = putBinary(a, script, "v2", strings.Repeat("0", 64))
	assert.Equal(t, http.StatusConflict, rec.Code)
	assert.Contains(t, rec.Body.String(), "incomplete or altered")

	a.op.Lock()
	rec = putBinary(a, script, "v2", "")
	assert.Equal(t, http.StatusConflict, rec.Code, rec.Body.String())
	assert.Contains(t, rec.Body.String(), "another bootstrap, demote or promote is running")
	a.op.Unlock()
	assert.Equal(t, "old", readString(t, stage.current), "nothing changed")
	assert.NoFileExists(t, stage.newPath())
	assert.NoFileExists(t, stage.oldPath())
	assert.Empty(t, a.takeovers)

	rec = putBinary(a, script, "v2", "")
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	assert.JSONEq(t, `{"from":"`+agentapi.Version()+`","version":"v2"}`, rec.Body.String())
	assert.Equal(t, script, readString(t, stage.current))
	assert.Equal(t, "old", readString(t, stage.oldPath()))
	require.Len(t, a.takeovers, 1)
	assert.Equal(t, "v2", (<-a.takeovers).version)
	assert.False(t, a.op.TryLock(), "the operation lock is the switch's")
}
