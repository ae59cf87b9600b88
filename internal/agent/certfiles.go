package agent

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

// certFiles serves the key pair in two files, loaded again whenever either
// changes (the certificate is renewed in place in its mounted Secret).
type certFiles struct {
	cert, key string

	mu      sync.Mutex
	stamp   string
	current *tls.Certificate
}

// get is tls.Config.GetCertificate.
func (c *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	stamp := ""
	for _, p := range []string{c.cert, c.key} {
		fi, err := os.Stat(p)
		if err != nil {
			if c.current != nil {
				return c.current, nil
			}
			return nil, fmt.Errorf("loading the endpoint's certificate: %w", err)
		}
		stamp += fi.ModTime().Format(time.RFC3339Nano) + fmt.Sprint(fi.Size())
	}
	if c.current != nil && stamp == c.stamp {
		return c.current, nil
	}
	pair, err := tls.LoadX509KeyPair(c.cert, c.key)
	if err != nil {
		if c.current != nil { // half-written: keep serving the old one
			return c.current, nil
		}
		return nil, fmt.Errorf("loading the endpoint's certificate: %w", err)
	}
	c.current, c.stamp = &pair, stamp
	return c.current, nil
}
