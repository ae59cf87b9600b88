package roles_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/roles"
)

// fakeConn answers the queries of Apply from a script and records the
// statements; failOn makes the statement containing it fail.
type fakeConn struct {
	bootstrap string
	verifier  *string
	dbExists  bool
	failOn    string
	sent      []string
}

func (f *fakeConn) Exec(_ context.Context, sql string) ([]string, error) {
	f.sent = append(f.sent, sql)
	if f.failOn != "" && strings.Contains(sql, f.failOn) {
		return nil, errors.New("ERROR: refused by the server (SQLSTATE 42501)")
	}
	return nil, nil
}

func (f *fakeConn) QueryValue(_ context.Context, sql string) (*string, bool, error) {
	f.sent = append(f.sent, sql)
	switch {
	case strings.Contains(sql, "oid = 10"):
		return &f.bootstrap, true, nil
	case strings.Contains(sql, "pg_database"):
		one := "1"
		return &one, f.dbExists, nil
	case strings.Contains(sql, "rolpassword"):
		return f.verifier, true, nil
	}
	return nil, false, fmt.Errorf("unexpected query")
}

const password = "a-password-that-must-not-leak"

// TestApplyNeverLeaksThePassword: whatever Apply sends, returns or fails
// with holds no plaintext, and its errors and result hold no verifier
// either (they end up in conditions, Events and logs).
func TestApplyNeverLeaksThePassword(t *testing.T) {
	ctx := context.Background()
	eng := engine.Postgres{}
	app := roles.App{Role: "app", Database: "app", Password: password}
	for name, conn := range map[string]*fakeConn{
		"new":               {bootstrap: "postgres"},
		"converged":         {bootstrap: "postgres", dbExists: true},
		"legacy":            {bootstrap: "app", dbExists: true},
		"ALTER ROLE fails":  {bootstrap: "postgres", dbExists: true, failOn: "PASSWORD"},
		"CREATE DB fails":   {bootstrap: "postgres", failOn: "CREATE DATABASE"},
		"EnsureAppRole err": {bootstrap: "postgres", failOn: "DO "},
	} {
		if name == "converged" {
			v, err := engine.ScramVerifier(password)
			require.NoError(t, err)
			conn.verifier = &v
		}
		res, err := roles.Apply(ctx, conn, eng, app)
		for _, sql := range conn.sent {
			assert.NotContains(t, sql, password, "%s: a statement holds the plaintext", name)
		}
		text := fmt.Sprintf("%+v %v", res, err)
		assert.NotContains(t, text, password, name)
		assert.NotContains(t, text, "SCRAM-SHA-256$", name)
		switch name {
		case "converged":
			require.NoError(t, err)
			assert.False(t, res.Changed(), "nothing to write")
		case "legacy":
			require.NoError(t, err)
			assert.Equal(t, roles.Result{Legacy: true, PasswordSet: true}, res)
			for _, sql := range conn.sent {
				assert.NotContains(t, sql, "DO ", "a legacy role is not touched beyond its password")
			}
		case "new":
			require.NoError(t, err)
			assert.Equal(t, roles.Result{CreatedDatabase: true, PasswordSet: true}, res)
		default:
			assert.Error(t, err, name)
		}
	}

	conn := &fakeConn{bootstrap: "postgres"}
	_, err := roles.Apply(ctx, conn, eng, roles.App{Role: "app", Database: "app", Password: ""})
	assert.ErrorIs(t, err, engine.ErrEmptyPassword)
	assert.Empty(t, conn.sent, "an invalid password sends nothing")
	_, err = roles.Apply(ctx, conn, eng, roles.App{Role: "pg_app", Database: "app", Password: password})
	assert.ErrorIs(t, err, engine.ErrNameReserved)
}
