package agent

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// throwawayServer is the verification's own server on the restored data
// directory: no network, archive_mode off, its output in a log file.
type throwawayServer struct {
	cmd     *exec.Cmd
	logFile *os.File
	logPath string
	// done is closed once the server has exited, with err its exit; both
	// waitPromoted and stop wait on it, so neither takes the exit from
	// the other (a server that died during the replay once left stop
	// waiting forever, and the verification Job with it).
	done chan struct{}
	err  error
}

// startThrowaway starts the throwaway server on cfg.PGData, with its own
// pg_hba.conf and log file in work.
func startThrowaway(cfg VerifyConfig, work string) (*throwawayServer, error) {
	// its own pg_hba.conf: trust on the socket, nothing else.
	hba := filepath.Join(work, "pg_hba.conf")
	if err := os.WriteFile(hba, []byte("local all all trust\n"), 0o600); err != nil {
		return nil, fmt.Errorf("writing %s: %w", hba, err)
	}
	logPath := filepath.Join(work, "postgres.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", logPath, err)
	}
	server := exec.Command("postgres", "-D", cfg.PGData,
		"-c", "listen_addresses=", "-c", "port="+strconv.Itoa(cfg.Port), "-c", "unix_socket_directories="+cfg.SocketDir,
		"-c", "hba_file="+hba, "-c", "ssl=off", "-c", "archive_mode=off", "-c", "hot_standby=on",
		"-c", "log_min_messages=warning")
	server.Env = append(os.Environ(), "LC_ALL=C")
	return watchServer(server, logFile, logPath)
}

// watchServer starts cmd with its output in logFile and watches for its
// exit.
func watchServer(cmd *exec.Cmd, logFile *os.File, logPath string) (*throwawayServer, error) {
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting the server: %w", err)
	}
	s := &throwawayServer{cmd: cmd, logFile: logFile, logPath: logPath, done: make(chan struct{})}
	go func() {
		s.err = cmd.Wait()
		close(s.done)
	}()
	return s, nil
}

// stop stops the server and closes its log file.
func (s *throwawayServer) stop() {
	// a fast shutdown; the volume goes with the pod anyway.
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.done:
	case <-time.After(time.Minute):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	_ = s.logFile.Close()
}

// log is the end of the server's log.
func (s *throwawayServer) log() string {
	b, _ := os.ReadFile(s.logPath)
	return tail(string(b), 800)
}

// waitPromoted connects to the throwaway server once it has replayed the
// archive and promoted, and fails when it exits first.
func waitPromoted(ctx context.Context, cfg VerifyConfig, server *throwawayServer) (*pgx.Conn, error) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-server.done:
			return nil, fmt.Errorf("the server stopped during the replay (%v): %s", server.err, server.log())
		case <-ctx.Done():
			return nil, fmt.Errorf("the replay did not finish in time: %s", server.log())
		case <-tick.C:
		}
		conn, err := connectLocal(ctx, cfg, "postgres")
		if err != nil {
			continue
		}
		var recovering bool
		if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovering); err == nil && !recovering {
			return conn, nil
		}
		conn.Close(context.Background())
	}
}

// connectLocal connects to database db of the throwaway server over its
// socket, as the superuser (trust).
func connectLocal(ctx context.Context, cfg VerifyConfig, db string) (*pgx.Conn, error) {
	c, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable connect_timeout=3 application_name=dbkeeper-verify",
		conninfoValue(cfg.SocketDir), cfg.Port, conninfoValue(cfg.User), conninfoValue(db)))
	if err != nil {
		return nil, fmt.Errorf("connecting to the restored server: %w", err)
	}
	return c, nil
}

// runOutput runs a command and returns its combined output.
func runOutput(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	err := cmd.Run()
	return out.String(), err
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
