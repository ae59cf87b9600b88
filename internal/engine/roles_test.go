package engine_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/engine"
)

func TestQuoteIdentifier(t *testing.T) {
	for in, want := range map[string]string{
		"app":          `"app"`,
		"App":          `"App"`,
		`we"ird`:       `"we""ird"`,
		`x'; DROP --`:  `"x'; DROP --"`,
		"ä日本":          `"ä日本"`,
		`back\slash`:   `"back\slash"`,
		"with space":   `"with space"`,
		`""`:           `""""""`,
		"select":       `"select"`,
		"sixty-three-": `"sixty-three-"`,
	} {
		got, err := engine.QuoteIdentifier(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for in, want := range map[string]error{
		"":                      engine.ErrNameEmpty,
		"a\x00b":                engine.ErrNameNUL,
		strings.Repeat("x", 64): engine.ErrNameTooLong,
	} {
		_, err := engine.QuoteIdentifier(in)
		assert.ErrorIs(t, err, want, in)
	}
	_, err := engine.QuoteIdentifier(strings.Repeat("x", 63))
	assert.NoError(t, err, "63 bytes fit")
}

func TestQuoteLiteral(t *testing.T) {
	for in, want := range map[string]string{
		"":            `''`,
		"plain":       `'plain'`,
		"it's":        `'it''s'`,
		`back\slash`:  `E'back\\slash'`,
		`\'; DROP --`: `E'\\''; DROP --'`,
	} {
		got, err := engine.QuoteLiteral(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	_, err := engine.QuoteLiteral("a\x00b")
	assert.Error(t, err)
}

func TestCheckAppRole(t *testing.T) {
	pg := engine.Postgres{}
	for _, ok := range []string{"app", "App", "orders_rw", `we"ird`, "pg", "pgx", "ä"} {
		assert.NoError(t, pg.CheckAppRole(ok), ok)
	}
	for name, want := range map[string]error{
		"":                      engine.ErrNameEmpty,
		strings.Repeat("a", 64): engine.ErrNameTooLong,
		"a\x00":                 engine.ErrNameNUL,
		"public":                engine.ErrNameReserved,
		"PUBLIC":                engine.ErrNameReserved,
		"none":                  engine.ErrNameReserved,
		"current_user":          engine.ErrNameReserved,
		"session_user":          engine.ErrNameReserved,
		"current_role":          engine.ErrNameReserved,
		"pg_monitor":            engine.ErrNameReserved,
		"postgres":              engine.ErrNameIsSuper,
	} {
		err := pg.CheckAppRole(name)
		assert.ErrorIs(t, err, want, "%q", name)
	}
	for _, bad := range []string{"postgres", "template0", "template1", ""} {
		assert.Error(t, pg.CheckAppDatabase(bad), bad)
	}
	assert.NoError(t, pg.CheckAppDatabase("app"))
}

// TestRoleSQLNeverHoldsThePassword: the statements that set a password
// hold a SCRAM verifier, never the plaintext, and refuse what
// CheckPassword refuses without a statement at all.
func TestRoleSQLNeverHoldsThePassword(t *testing.T) {
	pg := engine.Postgres{}
	const password = "the-plaintext-password"
	sql, err := pg.SetPassword("app", password)
	require.NoError(t, err)
	assert.NotContains(t, sql, password)
	assert.Regexp(t, `^ALTER ROLE "app" PASSWORD 'SCRAM-SHA-256\$4096:[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+'$`, sql)
	for _, bad := range []string{"", "a\x00b", "pass\u00a0word"} {
		sql, err := pg.SetPassword("app", bad)
		assert.Error(t, err, "%q", bad)
		assert.Empty(t, sql)
	}
	_, err = pg.SetPassword("", password)
	assert.ErrorIs(t, err, engine.ErrNameEmpty)
}

func TestLegacyRoleName(t *testing.T) {
	pg := engine.Postgres{}
	assert.Equal(t, "app_superuser_legacy", pg.LegacyRoleName("app"))
	long := pg.LegacyRoleName(strings.Repeat("ä", 40))
	assert.LessOrEqual(t, len(long), 63)
	assert.True(t, strings.HasSuffix(long, "_superuser_legacy"))
	_, err := engine.QuoteIdentifier(long)
	assert.NoError(t, err)
	_, err = pg.MigrateLegacyAppRole("postgres", "x")
	assert.ErrorIs(t, err, engine.ErrNameIsSuper)
}
