package sqlconn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"

	"github.com/dbkeeper/dbkeeper/internal/engine"
)

// TestErrorClasses: what the secret controller reports as RotationPending
// (unreachable: retry) and what as a refused login or statement.
func TestErrorClasses(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: code}) }
	for name, tc := range map[string]struct {
		err               error
		auth, unreachable bool
	}{
		"wrong password":       {pg("28P01"), true, false},
		"no login":             {pg("28000"), true, false},
		"insufficient privs":   {pg("42501"), false, false},
		"lock timeout":         {pg("55P03"), false, false},
		"connection failure":   {pg("08006"), false, true},
		"too many connections": {pg("53300"), false, true},
		"starting up":          {pg("57P03"), false, true},
		"dial":                 {&net.OpError{Op: "dial", Err: errors.New("connection refused")}, false, true},
		"dropped":              {fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), false, true},
		"deadline":             {context.DeadlineExceeded, false, true},
		"empty password":       {fmt.Errorf("password of role app: %w", engine.ErrEmptyPassword), false, false},
		"reserved name":        {engine.ErrNameReserved, false, false},
	} {
		assert.Equal(t, tc.auth, AuthFailed(tc.err), "%s: AuthFailed", name)
		assert.Equal(t, tc.unreachable, Unreachable(tc.err), "%s: Unreachable", name)
	}
}
