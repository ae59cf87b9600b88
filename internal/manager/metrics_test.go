package manager

import (
	"crypto/tls"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestMetricsOptions: plain HTTP unless MetricsSecure; secure means HTTPS
// behind the authentication and authorization filter, HTTP/1.1 only, with
// the certificate directory passed through (empty: self-signed).
func TestMetricsOptions(t *testing.T) {
	plain := MetricsOptions(Options{MetricsBindAddress: ":8080"})
	assert.Equal(t, ":8080", plain.BindAddress)
	assert.False(t, plain.SecureServing)
	assert.Nil(t, plain.FilterProvider, "plain metrics are not filtered")
	assert.Empty(t, plain.TLSOpts)

	secure := MetricsOptions(Options{MetricsBindAddress: ":8443", MetricsSecure: true, MetricsCertDir: "/certs"})
	assert.Equal(t, ":8443", secure.BindAddress)
	assert.True(t, secure.SecureServing)
	assert.NotNil(t, secure.FilterProvider, "secure metrics need a token and get on /metrics")
	assert.Equal(t, "/certs", secure.CertDir)
	cfg := &tls.Config{NextProtos: []string{"h2"}}
	for _, opt := range secure.TLSOpts {
		opt(cfg)
	}
	assert.Equal(t, []string{"http/1.1"}, cfg.NextProtos, "HTTP/2 is off")

	assert.Empty(t, MetricsOptions(Options{MetricsBindAddress: ":8443", MetricsSecure: true}).CertDir, "no directory: self-signed")
}
