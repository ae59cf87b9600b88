package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/pki"
)

// A base backup reads a streaming standby's files when one exists, so
// that the copy does not weigh on the primary: pgBackRest's
// backup-from-standby (--backup-standby). The primary's pgBackRest still
// starts and stops the backup on the primary (pg1, local), waits until
// the standby replayed the backup's start, and copies the files from
// the standby (pg2) through the standby's TLS server (backupserver.go).
// Without TLS, without a streaming standby, or when the standby cannot
// be used (its server refuses, it goes away), the backup is taken from
// the primary, and BackupRun.Note says why.

// replica is a row of the primary's pg_stat_replication.
type replica struct {
	name  string
	state string
	// lag is how many bytes the standby's replay is behind the primary;
	// negative when unknown.
	lag int64
}

// replicationSQL lists the primary's WAL senders.
const replicationSQL = `SELECT COALESCE(application_name, ''), COALESCE(state, ''),
	COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn), -1)::bigint
	FROM pg_stat_replication`

// pickStandby is the streaming standby to back up from among reps, other
// than self: the least behind (then by name); "" when none streams. Its
// application_name is its pod's name (primaryConninfo), a DNS label.
func pickStandby(self string, reps []replica) string {
	var ok []replica
	for _, r := range reps {
		if r.state == "streaming" && r.name != self && dnsLabel(r.name) {
			ok = append(ok, r)
		}
	}
	if len(ok) == 0 {
		return ""
	}
	sort.Slice(ok, func(i, j int) bool {
		li, lj := ok[i].lag, ok[j].lag
		if (li < 0) != (lj < 0) {
			return li >= 0 // a known lag first
		}
		if li != lj {
			return li < lj
		}
		return ok[i].name < ok[j].name
	})
	return ok[0].name
}

// dnsLabel says whether s is a DNS label, as pod names of a StatefulSet
// are.
func dnsLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// peer is how to reach the standby pod: Config.Peers, else
// <pod>.<PeerDomain> at BackupServerPort with this instance's paths and
// port (every instance of a StatefulSet has the same); false when it
// cannot be named.
func (a *Agent) peer(pod string) (Peer, bool) {
	if p, ok := a.cfg.Peers[pod]; ok {
		return p, true
	}
	if a.cfg.PeerDomain == "" {
		return Peer{}, false
	}
	return Peer{Host: pod + "." + a.cfg.PeerDomain, Port: a.cfg.BackupServerPort,
		PGData: a.cfg.PGData, SocketDir: a.cfg.SocketDir, PGPort: a.cfg.Port}, true
}

// standbyBackupArgs are the options of `pgbackrest backup` that copy the
// files from the standby p (pg2), through its TLS server, presenting the
// certificate in tlsDir (which the standby's server checks too) and
// verifying the server's with the CA there; user is the superuser both
// servers have.
func standbyBackupArgs(p Peer, tlsDir, user string) []string {
	return []string{
		// =y, not the bare flag: 2.45 takes both, and later versions made
		// the option take y, n or prefer.
		"--backup-standby=y",
		"--pg2-host=" + p.Host,
		"--pg2-host-type=tls",
		"--pg2-host-port=" + strconv.Itoa(p.Port),
		"--pg2-host-cert-file=" + filepath.Join(tlsDir, "tls.crt"),
		"--pg2-host-key-file=" + filepath.Join(tlsDir, "tls.key"),
		"--pg2-host-ca-file=" + filepath.Join(tlsDir, "ca.crt"),
		"--pg2-path=" + p.PGData,
		"--pg2-socket-path=" + p.SocketDir,
		"--pg2-port=" + strconv.Itoa(p.PGPort),
		"--pg2-user=" + user,
		// the warning that says why pg2 could not be used ("unable to
		// check pg2: ... access denied") comes before the error.
		"--log-level-stderr=warn",
	}
}

// standbyError is why a backup from a standby failed: pgBackRest's
// warning about pg2, then its error.
func standbyError(out string, err error) string {
	msg := err.Error()
	for _, l := range strings.Split(out, "\n") {
		if i := strings.Index(l, "unable to check pg2:"); i >= 0 {
			return strings.TrimSpace(l[i:]) + "; " + msg
		}
	}
	return msg
}

// backupSource says which standby to copy from (Peer and its name), or
// "" and why the primary's files are copied.
func (a *Agent) backupSource(ctx context.Context) (string, Peer, string) {
	if !a.runsBackupServer() {
		return "", Peer{}, "taken from the primary: backups from a standby need TLS (pgBackRest reaches a standby through its TLS server)"
	}
	cert, err := copyTLSFiles(a.cfg.TLSDir, a.backupTLSDir())
	if err != nil {
		return "", Peer{}, "taken from the primary: " + err.Error()
	}
	if !pki.ClientAuthUsable(cert) {
		return "", Peer{}, fmt.Sprintf("taken from the primary: the Database's certificate (serial %s) is not usable by a TLS client "+
			"(no clientAuth usage; certificates issued since backups from standbys have it, a renewal brings it)", pki.Serial(cert))
	}
	reps, err := a.replicas(ctx)
	if err != nil {
		return "", Peer{}, "taken from the primary: " + err.Error()
	}
	name := pickStandby(a.cfg.Pod, reps)
	if name == "" {
		return "", Peer{}, "taken from the primary: no standby streams"
	}
	p, ok := a.peer(name)
	if !ok {
		return "", Peer{}, fmt.Sprintf("taken from the primary: standby %s has no address ($%s is not set)", name, agentapi.EnvPeerDomain)
	}
	// pgBackRest retries a refused connection for minutes (two
	// io-timeouts) before it gives up on pg2: a standby whose server is
	// down, or refuses this certificate, is seen at once here.
	if err := probeBackupServer(ctx, p, a.backupTLSDir()); err != nil {
		return "", Peer{}, fmt.Sprintf("taken from the primary: the TLS server of standby %s cannot be used: %s", name, err)
	}
	return name, p, ""
}

// probeTimeout bounds the connection to a standby's TLS server and the
// wait for its refusal.
const probeTimeout = 5 * time.Second

// probeBackupServer connects to p's TLS server as pgBackRest does (the
// certificate and CA in tlsDir, p.Host verified) and waits a moment for a
// refusal of the certificate: with TLS 1.3 a server's alert comes after
// the client's handshake, on its first read.
func probeBackupServer(ctx context.Context, p Peer, tlsDir string) error {
	cert, err := tls.LoadX509KeyPair(filepath.Join(tlsDir, "tls.crt"), filepath.Join(tlsDir, "tls.key"))
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(filepath.Join(tlsDir, "ca.crt"))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("ca.crt holds no certificate")
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{RootCAs: pool, ServerName: p.Host, Certificates: []tls.Certificate{cert}}}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(p.Host, strconv.Itoa(p.Port)))
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		return err
	}
	return nil
}

// replicas reads pg_stat_replication.
func (a *Agent) replicas(ctx context.Context) ([]replica, error) {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	c, err := a.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close(context.Background())
	rows, err := c.Query(ctx, replicationSQL)
	if err != nil {
		return nil, fmt.Errorf("reading pg_stat_replication: %w", err)
	}
	defer rows.Close()
	var reps []replica
	for rows.Next() {
		var r replica
		if err := rows.Scan(&r.name, &r.state, &r.lag); err != nil {
			return nil, fmt.Errorf("reading pg_stat_replication: %w", err)
		}
		reps = append(reps, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading pg_stat_replication: %w", err)
	}
	return reps, nil
}

// backupFromStandby runs the backup of run from the standby p: it
// returns pgBackRest's error, with its warning about pg2.
func (a *Agent) backupFromStandby(run agentapi.BackupRun, p Peer) error {
	args := append([]string{"backup", "--type=" + run.Type, longIOTimeout}, standbyBackupArgs(p, a.backupTLSDir(), a.cfg.User)...)
	out, err := a.pgbackrest(a.ctx, a.archive.configPath(), backupTimeout, args...)
	if err != nil {
		return fmt.Errorf("%s", standbyError(out, err))
	}
	return nil
}
