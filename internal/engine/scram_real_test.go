package engine_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/test/framework/postgres"
)

// startServer starts a local PostgreSQL server; skipped under -short.
func startServer(t *testing.T) *postgres.Server {
	t.Helper()
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped under -short")
	}
	return postgres.Start(t)
}

// login runs sql with psql as user with password over TCP (SCRAM),
// returning psql's output, and an error when the login or the statement
// failed.
func login(srv *postgres.Server, user, password, database, sql string) (string, error) {
	cmd := exec.Command(filepath.Join(srv.Bin, "psql"), "--no-psqlrc", "--no-password", "--set=ON_ERROR_STOP=1", "-At",
		"-h", "127.0.0.1", "-p", strconv.Itoa(srv.Port), "-U", user, "-d", database, "-c", sql)
	cmd.Env = []string{"PGPASSWORD=" + password, "PGCONNECT_TIMEOUT=10"}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// rolpassword is what the server stores for role.
func rolpassword(t *testing.T, srv *postgres.Server, role string) string {
	t.Helper()
	return srv.SQL(t, "postgres", fmt.Sprintf("SELECT rolpassword FROM pg_authid WHERE rolname = '%s'", role))
}

// TestScramVerifierMatchesPostgreSQL lets the server hash passwords itself
// (password_encryption scram-sha-256) and recomputes each verifier with the
// server's salt: the two must be equal, byte for byte, ASCII and
// NFKC-normalized non-ASCII alike.
func TestScramVerifierMatchesPostgreSQL(t *testing.T) {
	srv := startServer(t)
	srv.SQL(t, "postgres", "CREATE ROLE hashed LOGIN")
	for _, password := range []string{"pencil", `sp ace'quote"back\slash`, "pässwörd-日本"} {
		srv.SQL(t, "postgres", fmt.Sprintf("SET password_encryption = 'scram-sha-256'; ALTER ROLE hashed PASSWORD '%s'",
			strings.ReplaceAll(password, "'", "''")))
		stored := rolpassword(t, srv, "hashed")
		require.True(t, engine.IsScramVerifier(stored), "the server stores a verifier: %s", stored)
		// SCRAM-SHA-256$<iterations>:<salt>$...
		params := strings.SplitN(strings.TrimPrefix(stored, "SCRAM-SHA-256$"), "$", 2)[0]
		iter, saltB64, _ := strings.Cut(params, ":")
		n, err := strconv.Atoi(iter)
		require.NoError(t, err)
		assert.Equal(t, engine.ScramIterations, n, "PostgreSQL's default iteration count")
		ours, err := engine.ScramVerifierWithSalt(password, salt(t, saltB64), n)
		require.NoError(t, err)
		assert.Equal(t, stored, ours, "password %q", password)
		assert.True(t, engine.ScramVerifierMatches(stored, password), "the server's verifier matches %q", password)
		assert.False(t, engine.ScramVerifierMatches(stored, password+"x"))
	}
}

// TestScramVerifierSetsAPassword sets a role's password as a verifier from
// ScramVerifier: the server stores it as it is (never the plaintext), the
// plaintext logs in over TCP with SCRAM, and a wrong password does not.
func TestScramVerifierSetsAPassword(t *testing.T) {
	srv := startServer(t)
	srv.SQL(t, "postgres", "CREATE ROLE app LOGIN")
	for _, password := range []string{"q7G3_x-0aZ9v2c8HkLmN1pQrStUvWxYz0123456789A", "pässwörd-日本", `it's "quoted"`} {
		verifier, err := engine.ScramVerifier(password)
		require.NoError(t, err)
		srv.SQL(t, "postgres", fmt.Sprintf("ALTER ROLE app PASSWORD '%s'", verifier))
		assert.Equal(t, verifier, rolpassword(t, srv, "app"), "stored as sent")

		out, err := login(srv, "app", password, "postgres", "SELECT current_user")
		require.NoError(t, err, "login with the password %q: %s", password, out)
		assert.Equal(t, "app", out)
		out, err = login(srv, "app", password+"x", "postgres", "SELECT 1")
		assert.Error(t, err, "a wrong password logged in")
		assert.Contains(t, out, "password authentication failed")
	}
}
