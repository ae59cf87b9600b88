package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
)

// Agent owns the postmaster and carries out the operator's requests.
type Agent struct {
	cfg    Config
	log    logr.Logger
	reaper *reaper
	// ready is the readiness check of /readyz, shared by the probes.
	ready *sharedCheck
	// pgpass is ReplicationUser's password file, for streaming and cloning.
	pgpass string
	// ctx ends when the agent shuts down; bootstraps run under it.
	ctx context.Context

	// op is held by the one bootstrap, demote or promote that runs; others
	// are refused.
	op sync.Mutex

	mu       sync.Mutex
	state    State
	message  string
	srv      *server
	stopping bool
	// fatal receives the reason the agent must exit: the postmaster
	// exited on its own, or could not be started again.
	fatal chan error
	// keeper holds the primary lease; nil without one (EnvLeaseName).
	keeper *leaseKeeper
	// promoting says a promote runs (a second failover promote is
	// accepted, not refused).
	promoting bool
	// fencedAt is when the agent last fenced its server.
	fencedAt time.Time
	// archive archives WAL and takes base backups; nil without a
	// Repository.
	archive *archiver
	// runtimeDir holds pgBackRest's configurations and logs, with a
	// Repository or a Recovery.
	runtimeDir string
	// recoveryExits counts the exits of the server during a restore's
	// recovery (recoveryExited): each one waits longer to start again.
	recoveryExits int
	// rewindFailures (under op) counts the rejoins in a row whose
	// pg_rewind failed (rewindFailed).
	rewindFailures int
	// bootstrapFailures (under mu) counts the bootstraps in a row that
	// failed, the last at bootstrapFailedAt: the next waits
	// recoveryRetryDelay(bootstrapFailures) after it (bootstrapBackoff).
	bootstrapFailures int
	bootstrapFailedAt time.Time
}

// server is one run of the image's command.
type server struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once it exited
	// expected, under Agent.mu, says the agent stopped it.
	expected bool
	// output is the end of what it wrote.
	output *outputTail
}

// newAgent returns an agent for cfg.
func newAgent(ctx context.Context, cfg Config, log logr.Logger) *Agent {
	a := &Agent{cfg: cfg, log: log, reaper: newReaper(), ctx: ctx, fatal: make(chan error, 1)}
	a.ready = &sharedCheck{fresh: readyFresh, check: a.ping}
	return a
}

func (a *Agent) setState(s State, msg string) {
	a.mu.Lock()
	a.state, a.message = s, msg
	a.mu.Unlock()
}

func (a *Agent) fail(err error) {
	a.setState(StateFailed, err.Error())
	select {
	case a.fatal <- err:
	default:
	}
}

// serverArgs is the image's command with the port, the socket directory
// and, for a standby, where and how to stream from.
func (a *Agent) serverArgs() []string {
	args := append([]string{}, a.cfg.Command...)
	args = append(args, "-c", "port="+strconv.Itoa(a.cfg.Port), "-c", "unix_socket_directories="+a.cfg.SocketDir)
	args = append(args, a.certAuthArgs()...)
	if a.commandSets("max_slot_wal_keep_size") {
		// the command's own setting wins (tests make slots lose WAL)
	} else if size, err := volumeSize(filepath.Dir(a.cfg.PGData)); err == nil {
		args = append(args, "-c", "max_slot_wal_keep_size="+slotWALCap(size))
	} else {
		a.log.Error(err, "Cannot size the data volume: max_slot_wal_keep_size stays unlimited")
	}
	if isStandby(a.cfg.PGData) {
		args = append(args,
			"-c", "primary_conninfo="+a.primaryConninfo(),
			"-c", "primary_slot_name="+SlotName(a.cfg.Pod))
		if !a.commandSets("wal_retrieve_retry_interval") {
			args = append(args, "-c", "wal_retrieve_retry_interval="+walRetrieveRetryInterval)
		}
	}
	args = append(args, a.archiveSettings()...)
	return append(args, a.recoveryArgs()...)
}

// walRetrieveRetryInterval is how long a standby's startup process waits
// before it starts a WAL receiver again (PostgreSQL's default is 5 s):
// after a failover a detached standby reaches the new primary on its next
// attempt, and in synchronous mode every commit waits for it.
const walRetrieveRetryInterval = "1s"

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
		conninfoValue(a.cfg.PrimaryHost), a.cfg.PrimaryPort, ReplicationUser, conninfoValue(a.pgpass), conninfoValue(app),
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

// startServer runs the image's command (which runs initdb first on an
// empty data directory) and watches it: once it accepts connections the
// state is Running; if it exits without the agent asking, the agent fails
// (during a restore's recovery it starts it again later, recoveryExited).
func (a *Agent) startServer(state State) error {
	if a.cfg.TLSDir == "" && hasCluster(a.cfg.PGData) {
		if _, err := ensureReplicationHBA(a.cfg.PGData); err != nil {
			return err
		}
	}
	if err := a.writeCertAuth(); err != nil {
		return err
	}
	// a data directory that starts a primary (or initdb's) needs the lease.
	if a.keeper != nil && !isStandby(a.cfg.PGData) && !a.keeper.holds() {
		return errors.New("not starting as a primary: this instance does not hold the primary lease")
	}
	if isStandby(a.cfg.PGData) {
		dropped, err := dropStandbySlots(a.cfg.PGData)
		if err != nil {
			return err
		}
		if len(dropped) > 0 {
			a.log.Info("Dropped the slots this instance kept as a primary", "slots", dropped)
		}
	}
	a.mu.Lock()
	running := a.srv != nil
	a.mu.Unlock()
	if !running {
		if err := a.clearStalePidFile(); err != nil {
			return err
		}
	}
	args := a.serverArgs()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "PGPORT="+strconv.Itoa(a.cfg.Port))
	output, err := teeOutput(cmd, os.Stdout, os.Stderr)
	if err != nil {
		return err
	}
	// the server has its own ends of the pipes once it started.
	defer output.closeWriters()
	// its own process group, so that a stop before the entrypoint execs
	// the server reaches initdb too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	srv := &server{cmd: cmd, done: make(chan struct{}), output: output}

	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopping {
		return errors.New("the agent is shutting down")
	}
	if a.srv != nil {
		return errors.New("the server already runs")
	}
	if err := a.reaper.start(cmd); err != nil {
		return fmt.Errorf("starting %s: %w", args[0], err)
	}
	a.log.Info("Started the server", "pid", cmd.Process.Pid, "standby", isStandby(a.cfg.PGData))
	a.srv, a.state, a.message = srv, state, ""
	go a.watchExit(srv)
	go a.watchReady(srv)
	return nil
}

// watchExit waits for srv's exit; one the agent did not ask for fails it,
// unless a restore's recovery has not finished (recoveryExited).
func (a *Agent) watchExit(srv *server) {
	err := a.reaper.wait(srv.cmd)
	a.mu.Lock()
	a.srv = nil
	expected := srv.expected
	a.mu.Unlock()
	close(srv.done)
	if expected {
		a.log.Info("The server stopped", "exit", fmt.Sprint(err))
		return
	}
	if err == nil {
		err = errors.New("exit status 0")
	}
	if a.recovering() {
		a.recoveryExited(srv, err)
		return
	}
	a.log.Error(err, "The server exited on its own")
	a.fail(fmt.Errorf("the server exited: %w", err))
}

// watchReady marks the agent Running once srv accepts connections, and
// then makes sure its hba file lets standbys stream (the entrypoint's
// initdb wrote it after the agent last could).
func (a *Agent) watchReady(srv *server) {
	for {
		select {
		case <-srv.done:
			return
		case <-time.After(200 * time.Millisecond):
		}
		// the entrypoint execs the server: until the postmaster is srv's
		// own process, what answers is initdb's temporary server.
		if postmasterPID(a.cfg.PGData) != srv.cmd.Process.Pid || a.ping(a.ctx) != nil {
			continue
		}
		a.mu.Lock()
		if a.srv == srv && (a.state == StateStarting || a.state == StateBootstrapping) {
			a.state, a.message = StateRunning, ""
		}
		a.mu.Unlock()
		a.log.Info("The server accepts connections")
		a.finishRecovery()
		a.pokeArchive()
		// PostgreSQL's checkpointer, which enforces archive_timeout, first
		// sleeps checkpoint_timeout while the startup process runs and is
		// not woken when it ends: a quiet primary's commits waited up to
		// 5 minutes instead of archive_timeout after every start
		// (TestArchiveTimeoutHoldsAfterARestart). A reload wakes it.
		reload := a.archive != nil
		if a.cfg.TLSDir == "" {
			if changed, err := ensureReplicationHBA(a.cfg.PGData); err != nil {
				a.log.Error(err, "Cannot let standbys stream")
			} else if changed {
				reload = true
			}
		}
		if reload {
			if err := a.exec(a.ctx, "SELECT pg_reload_conf()"); err != nil {
				a.log.Error(err, "Cannot reload the server's configuration")
			}
		}
		return
	}
}

// entrypointGrace is how long a stop waits for the entrypoint's shell
// (initdb, its temporary server, psql) before killing it.
const entrypointGrace = 10 * time.Second

// stopServer fast-shuts the server down (SIGINT: sessions end, committed
// WAL reaches connected standbys) and waits for it. Before the entrypoint
// execs the server, it stops the entrypoint's process group and the
// temporary server (pg_ctl starts it in a session of its own).
func (a *Agent) stopServer(ctx context.Context) error {
	a.mu.Lock()
	srv := a.srv
	if srv == nil {
		a.mu.Unlock()
		return nil
	}
	srv.expected = true
	a.mu.Unlock()
	pid := srv.cmd.Process.Pid
	a.log.Info("Stopping the server", "pid", pid)
	if pm := postmasterPID(a.cfg.PGData); pm != pid {
		return a.stopEntrypoint(ctx, srv, pm)
	}
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stopping the server: %w", err)
	}
	select {
	case <-srv.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stopping the server: %w", ctx.Err())
	}
}

// stopEntrypoint interrupts the entrypoint's group and its temporary
// server pm (0 when none), kills the group if it lingers, and waits for
// both.
func (a *Agent) stopEntrypoint(ctx context.Context, srv *server, pm int) error {
	group := -srv.cmd.Process.Pid
	_ = syscall.Kill(group, syscall.SIGINT)
	if pm > 0 {
		_ = syscall.Kill(pm, syscall.SIGINT)
	}
	select {
	case <-srv.done:
	case <-time.After(entrypointGrace):
		a.log.Info("The entrypoint lingers: killing it")
		_ = syscall.Kill(group, syscall.SIGKILL)
		<-srv.done
	case <-ctx.Done():
		return fmt.Errorf("stopping the entrypoint: %w", ctx.Err())
	}
	// the temporary server may have started meanwhile
	if pm = postmasterPID(a.cfg.PGData); pm > 0 && pm != srv.cmd.Process.Pid {
		_ = syscall.Kill(pm, syscall.SIGINT)
		for syscall.Kill(pm, 0) == nil {
			select {
			case <-ctx.Done():
				return fmt.Errorf("stopping the temporary server: %w", ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// outputTailSize is how much of a server's output the agent keeps: its
// last lines, which say why it exited.
const outputTailSize = 32 << 10

// outputTail is the end of what one run of the server wrote to its stdout
// and stderr, each of which goes on unchanged to the agent's own (the
// container's log).
type outputTail struct {
	mu  sync.Mutex
	buf []byte
	// writers are the agent's copies of the pipes' write ends.
	writers []*os.File
	// done is closed once every process that held the pipes closed them.
	done chan struct{}
}

// teeOutput gives cmd's stdout and stderr to pipes copied both to stdout
// and stderr (the agent's own) and to the returned tail. The copies go on
// as long as any process holds the pipes, without delaying cmd's Wait; the
// caller closes the agent's ends once cmd started (or will not).
func teeOutput(cmd *exec.Cmd, stdout, stderr io.Writer) (*outputTail, error) {
	t := &outputTail{done: make(chan struct{})}
	var copies sync.WaitGroup
	for _, dst := range []io.Writer{stdout, stderr} {
		r, w, err := os.Pipe()
		if err != nil {
			t.closeWriters()
			return nil, fmt.Errorf("making a pipe for the server's output: %w", err)
		}
		t.writers = append(t.writers, w)
		copies.Go(func() {
			defer r.Close()
			_, _ = io.Copy(io.MultiWriter(t, dst), r)
		})
	}
	go func() { copies.Wait(); close(t.done) }()
	cmd.Stdout, cmd.Stderr = t.writers[0], t.writers[1]
	return t, nil
}

// closeWriters closes the agent's ends of the pipes.
func (t *outputTail) closeWriters() {
	for _, w := range t.writers {
		_ = w.Close()
	}
}

// Write keeps the last outputTailSize bytes (at least) of what was written.
func (t *outputTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*outputTailSize {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-outputTailSize:]...)
	}
	return len(p), nil
}

// lines is what the tail holds, once every process closed the pipes or
// wait passed.
func (t *outputTail) lines(wait time.Duration) string {
	select {
	case <-t.done:
	case <-time.After(wait):
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// exitLine is the line of a server's output that says why it exited, from
// its severity on: the last PANIC, else the last FATAL other than a
// refused connection's ("the database system is starting up", which the
// agent's own attempts to connect leave); "" when there is none.
func exitLine(out string) string {
	lines := strings.Split(out, "\n")
	for _, sev := range []string{"PANIC:", "FATAL:"} {
		for i := len(lines) - 1; i >= 0; i-- {
			j := strings.Index(lines[i], sev)
			if j < 0 {
				continue
			}
			if l := strings.Join(strings.Fields(lines[i][j:]), " "); !strings.HasPrefix(l, "FATAL: the database system is ") {
				return l
			}
		}
	}
	return ""
}
