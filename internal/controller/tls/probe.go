package tls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// probeTimeout bounds one look at what a server serves.
const probeTimeout = 5 * time.Second

// ErrNoTLS is the answer of a server that does not offer TLS.
var ErrNoTLS = errors.New("the server does not offer TLS")

// Prober learns which certificate a Database's server serves.
type Prober interface {
	// Served returns the certificate the server at addr (host:port)
	// presents, or ErrNoTLS when it does not offer TLS.
	Served(ctx context.Context, addr string) (*x509.Certificate, error)
}

// PostgresProber asks a PostgreSQL server for TLS as libpq does (an
// SSLRequest packet, answered 'S' or 'N') and records the certificate of
// the handshake. It sends no credentials and verifies nothing: it only
// looks, and hangs up before the server asks for a login.
type PostgresProber struct{}

// sslRequestCode is PostgreSQL's SSLRequest code, 1234 << 16 | 5679.
const sslRequestCode = 80877103

// Served implements Prober.
func (PostgresProber) Served(ctx context.Context, addr string) (*x509.Certificate, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", addr, err)
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	req := make([]byte, 8)
	binary.BigEndian.PutUint32(req[0:4], 8)
	binary.BigEndian.PutUint32(req[4:8], sslRequestCode)
	if _, err := conn.Write(req); err != nil {
		return nil, fmt.Errorf("asking %s for TLS: %w", addr, err)
	}
	answer := make([]byte, 1)
	if _, err := io.ReadFull(conn, answer); err != nil {
		return nil, fmt.Errorf("reading the TLS answer of %s: %w", addr, err)
	}
	switch answer[0] {
	case 'S':
	case 'N':
		return nil, ErrNoTLS
	default:
		return nil, fmt.Errorf("%s answered the TLS request with %q, not S or N", addr, answer[0])
	}
	var served *x509.Certificate
	client := tls.Client(conn, &tls.Config{
		// Nothing is sent over this connection: it is verified by the
		// comparison with the Secret's certificate, not by a CA.
		InsecureSkipVerify: true, //nolint:gosec // see above
		MinVersion:         tls.VersionTLS12,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return errors.New("no certificate")
			}
			cert, err := x509.ParseCertificate(raw[0])
			served = cert
			return err
		},
	})
	if err := client.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	_ = client.Close()
	return served, nil
}
