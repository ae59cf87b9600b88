package sqlconn

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCleartextPasswordRequestRefused (issue 29): a server (or whoever
// answers at its address, with TLS off or not yet verified) that asks for
// the password in clear never gets it: Connect refuses every method but
// SCRAM. Before, the manager answered the request with the password.
func TestCleartextPasswordRequestRefused(t *testing.T) {
	for name, auth := range map[string]pgproto3.BackendMessage{
		"cleartext": &pgproto3.AuthenticationCleartextPassword{},
		"md5":       &pgproto3.AuthenticationMD5Password{Salt: [4]byte{1, 2, 3, 4}},
		"none":      &pgproto3.AuthenticationOk{},
	} {
		t.Run(name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer ln.Close()
			got := make(chan pgproto3.FrontendMessage, 4)
			go func() {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				be := pgproto3.NewBackend(conn, conn)
				if _, err := be.ReceiveStartupMessage(); err != nil {
					return
				}
				be.Send(auth)
				if _, ok := auth.(*pgproto3.AuthenticationOk); ok {
					be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
				}
				if err := be.Flush(); err != nil {
					return
				}
				for {
					m, err := be.Receive()
					if err != nil {
						close(got)
						return
					}
					got <- m
				}
			}()
			port := ln.Addr().(*net.TCPAddr).Port
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := Connect(ctx, Target{Host: "127.0.0.1", Port: int32(port), User: "dbkeeper", Password: "the-superuser-password",
				Database: "postgres", SSLMode: "disable"})
			if err == nil {
				c.Close(ctx)
			}
			require.Error(t, err, "a connection without SCRAM")
			assert.NotContains(t, err.Error(), "the-superuser-password")
			for m := range got {
				_, isPassword := m.(*pgproto3.PasswordMessage)
				assert.False(t, isPassword, "the password was sent: %#v", m)
			}
		})
	}
}
