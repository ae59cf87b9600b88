package sqlconn_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
	"github.com/dbkeeper/dbkeeper/test/framework/postgres"
)

func exec(t *testing.T, ctx context.Context, c *sqlconn.Conn, sql string, err error) []string {
	t.Helper()
	require.NoError(t, err)
	notices, err := c.Exec(ctx, sql)
	require.NoError(t, err)
	return notices
}

// TestRotationThroughPgx runs the RoleSQL as the operator will: through pgx,
// as the superuser, reading the stored verifier to decide whether to write,
// and logging in as the application with each password.
func TestRotationThroughPgx(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped under -short")
	}
	srv := postgres.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	super := sqlconn.Target{Host: "127.0.0.1", Port: int32(srv.Port), User: postgres.Superuser, Password: srv.Password, Database: "postgres"}
	c, err := sqlconn.Connect(ctx, super)
	require.NoError(t, err)
	defer c.Close(ctx)
	pg := engine.Postgres{}

	sql, err := pg.EnsureAppRole("app")
	notices := exec(t, ctx, c, sql, err)
	assert.Contains(t, notices, "dbkeeper: created role app")
	notices = exec(t, ctx, c, sql, err)
	assert.Empty(t, notices, "nothing to repair the second time")

	exists, err := pg.AppDatabaseExists("app")
	require.NoError(t, err)
	_, ok, err := c.QueryValue(ctx, exists)
	require.NoError(t, err)
	require.False(t, ok)
	sql, err = pg.CreateAppDatabase("app", "app")
	exec(t, ctx, c, sql, err)
	_, ok, err = c.QueryValue(ctx, exists)
	require.NoError(t, err)
	assert.True(t, ok)

	stored, err := pg.StoredPassword("app")
	require.NoError(t, err)
	v, ok, err := c.QueryValue(ctx, stored)
	require.NoError(t, err)
	require.True(t, ok, "the role exists")
	assert.Nil(t, v, "no password yet")

	for _, password := range []string{"first", "second"} {
		sql, err = pg.SetPassword("app", password)
		exec(t, ctx, c, sql, err)
		v, _, err = c.QueryValue(ctx, stored)
		require.NoError(t, err)
		require.NotNil(t, v)
		assert.True(t, engine.ScramVerifierMatches(*v, password))

		app := sqlconn.Target{Host: "127.0.0.1", Port: int32(srv.Port), User: "app", Password: password, Database: "app"}
		a, err := sqlconn.Connect(ctx, app)
		require.NoError(t, err, "log in with %s", password)
		who, _, err := a.QueryValue(ctx, "SELECT current_user")
		require.NoError(t, err)
		assert.Equal(t, "app", *who)
		require.NoError(t, a.Close(ctx))
	}

	t.Run("a wrong password: the error never holds it", func(t *testing.T) {
		wrong := super
		wrong.Password = "not-the-password-0123"
		_, err := sqlconn.Connect(ctx, wrong)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "password authentication failed")
		assert.NotContains(t, err.Error(), wrong.Password)
		assert.NotContains(t, err.Error(), srv.Password)
	})

	t.Run("a refused statement: the server's error, without the statement", func(t *testing.T) {
		// A role may change its own password (the operator's check sets
		// the Secret's back), not another's.
		sql, err := pg.SetPassword(postgres.Superuser, "third")
		require.NoError(t, err)
		_, err = c.Exec(ctx, "SET ROLE app; "+sql)
		require.Error(t, err)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "%T", err)
		assert.Equal(t, "42501", pgErr.Code, "insufficient_privilege: %s", pgErr.Message)
		assert.NotContains(t, err.Error(), "SCRAM-SHA-256$")
		_, err = c.Exec(ctx, "RESET ROLE")
		require.NoError(t, err)
	})
}
