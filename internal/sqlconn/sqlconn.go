// Package sqlconn runs an engine's RoleSQL in a Database's server: one
// connection at a time as its superuser (no pool), short timeouts, the
// server's NOTICEs collected (the repairs the role SQL reports), and errors
// that never quote the statement, which may hold a password verifier
// (docs/design/roles-and-rotation.md, D2).
package sqlconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Timeouts of every connection: to connect, for one statement, to wait for
// a lock (ALTER ROLE waits for nothing long, a stuck one is reported).
const (
	ConnectTimeout   = 5 * time.Second
	StatementTimeout = 10 * time.Second
	LockTimeout      = 5 * time.Second
)

// ApplicationName is what pg_stat_activity shows for the operator's
// sessions.
const ApplicationName = "dbkeeper"

// Target is the server and the login to connect with.
type Target struct {
	Host     string
	Port     int32
	User     string
	Password string
	Database string
	// SSLMode is libpq's sslmode; empty means prefer (until the pods have
	// certificates the operator verifies: issue 17 item 3).
	SSLMode string
	// TLS, when set, is the TLS configuration of the connection (the CA
	// and the host name to verify, for a server reached by its pod IP):
	// it replaces SSLMode's, and there is no plaintext fallback.
	TLS *tls.Config
}

// Conn is one connection to a server.
type Conn struct {
	conn    *pgx.Conn
	mu      sync.Mutex
	notices []string
}

// Connect opens a connection to t. The error names the host, port, user
// and database, never the password.
func Connect(ctx context.Context, t Target) (*Conn, error) {
	sslmode := t.SSLMode
	if sslmode == "" {
		sslmode = "prefer"
	}
	// only SCRAM: a server (or whoever answers at its address) that asks
	// for the password in clear or as MD5, or for none, is refused before
	// it gets anything (libpq's require_auth); with a client certificate
	// over a verified TLS connection, a server that asks for nothing more
	// (cert authentication) is the one the CA vouched for.
	requireAuth := "scram-sha-256"
	if t.TLS != nil && len(t.TLS.Certificates) > 0 {
		requireAuth += ",none"
	}
	// Fields as a keyword/value string, so that sslmode's fallbacks (TLS,
	// then plain) all get the same host, port and login.
	kv := []string{
		"host=" + quoteValue(t.Host),
		"port=" + strconv.Itoa(int(t.Port)),
		"user=" + quoteValue(t.User),
		"password=" + quoteValue(t.Password),
		"dbname=" + quoteValue(t.Database),
		"sslmode=" + quoteValue(sslmode),
		"connect_timeout=" + strconv.Itoa(int(ConnectTimeout.Seconds())),
		"application_name=" + ApplicationName,
		"statement_timeout=" + strconv.Itoa(int(StatementTimeout.Milliseconds())),
		"lock_timeout=" + strconv.Itoa(int(LockTimeout.Milliseconds())),
		"require_auth=" + requireAuth,
	}
	cfg, err := pgx.ParseConfig(strings.Join(kv, " "))
	if err != nil {
		return nil, fmt.Errorf("connection settings for %s: %w", t, scrub(err, t.Password))
	}
	if t.TLS != nil {
		cfg.TLSConfig = t.TLS
		cfg.Fallbacks = nil
	}
	c := &Conn{}
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.notices = append(c.notices, n.Message)
	}
	// No statement cache: each statement runs once, and the simple
	// protocol sends a DO block as it is.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	c.conn, err = pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", t, scrub(err, t.Password))
	}
	return c, nil
}

// String is the target without its password.
func (t Target) String() string {
	return fmt.Sprintf("%s:%d as %s, database %s", t.Host, t.Port, t.User, t.Database)
}

// Close closes the connection.
func (c *Conn) Close(ctx context.Context) error { return c.conn.Close(ctx) }

// Exec runs one statement and returns the NOTICEs it raised. The error is
// the server's (a *pgconn.PgError with its SQLSTATE, see errors.As), never
// with the statement's text.
func (c *Conn) Exec(ctx context.Context, sql string) ([]string, error) {
	c.mu.Lock()
	c.notices = nil
	c.mu.Unlock()
	_, err := c.conn.Exec(ctx, sql)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.notices, plain(err)
}

// QueryValue runs a query of at most one row and one column: ok is false
// when there is no row, value is nil when the column is NULL. Notices
// returns what the server noticed meanwhile.
func (c *Conn) QueryValue(ctx context.Context, sql string) (value *string, ok bool, err error) {
	c.mu.Lock()
	c.notices = nil
	c.mu.Unlock()
	err = c.conn.QueryRow(ctx, sql).Scan(&value)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, plain(err)
	}
	return value, true, nil
}

// Notices are the NOTICEs and WARNINGs the server sent during the last
// statement.
func (c *Conn) Notices() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.notices)
}

// plain keeps the server's error as it is and drops anything of pgx's
// that could carry the statement.
func plain(err error) error {
	if err == nil {
		return nil
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg
	}
	return err
}

// scrub removes the password from an error's text (pgx's connection
// errors name the settings, and a parse error could quote them).
func scrub(err error, password string) error {
	if password == "" || !strings.Contains(err.Error(), password) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), password, "<password>"))
}

// quoteValue quotes a keyword/value connection string value.
func quoteValue(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// AuthFailed reports whether err is the server refusing the login: a wrong
// password, a role that does not exist or cannot log in (SQLSTATE 28P01,
// 28000).
func AuthFailed(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (pg.Code == "28P01" || pg.Code == "28000")
}

// Unreachable reports whether err is trouble reaching the server, which
// a later attempt may not have, rather than the server refusing a
// statement or a value refused before anything was sent: a network error,
// a timeout, a dropped connection, or a server error of the classes
// connection exception (08), insufficient resources (53) and operator
// intervention (57: shutting down, starting up).
func Unreachable(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch pg.Code[:min(2, len(pg.Code))] {
		case "08", "53", "57":
			return true
		}
		return false
	}
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	return errors.As(err, &netErr) || errors.As(err, &connectErr) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded)
}
