package reposerver_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/reposerver"
	"github.com/dbkeeper/dbkeeper/test/framework"
	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
)

// TestServerServesTheBucketAndReloadsItsCertificate runs the repository
// server over a real versitygw: the bucket's directory exists, the server
// answers HTTPS with the certificate it was given (S3 refuses an anonymous
// request), and a certificate renewed in its files is served without a
// restart; SIGTERM (the context) stops it.
func TestServerServesTheBucketAndReloadsItsCertificate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs versitygw; skipped under -short")
	}
	assets, err := envtest.AssetsDir()
	require.NoError(t, err)
	bin := filepath.Join(assets, "versitygw")
	_, err = os.Stat(bin)
	require.NoError(t, err, "versitygw is built by make tools")
	dir := t.TempDir()
	now := time.Now()
	ca, err := pki.NewCA("test-ca", now)
	require.NoError(t, err)
	issue := func() *x509.Certificate {
		pair, err := pki.IssueServer(ca, []string{"localhost"}, time.Now(), time.Hour)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "tls.key.tmp"), pair.Key, 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "tls.crt.tmp"), pair.Cert, 0o600))
		require.NoError(t, os.Rename(filepath.Join(dir, "tls.key.tmp"), filepath.Join(dir, "tls.key")))
		require.NoError(t, os.Rename(filepath.Join(dir, "tls.crt.tmp"), filepath.Join(dir, "tls.crt")))
		cert, err := pki.ParseCertificate(pair.Cert)
		require.NoError(t, err)
		return cert
	}
	first := issue()
	port, err := framework.FreePort()
	require.NoError(t, err)
	t.Setenv(reposerver.EnvAccessKeyID, "KEY")
	t.Setenv(reposerver.EnvSecretAccessKey, "secret-of-the-test")
	cfg := reposerver.Config{Binary: bin, Dir: filepath.Join(dir, "repository"), CertFile: filepath.Join(dir, "tls.crt"),
		KeyFile: filepath.Join(dir, "tls.key"), Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Region: "us-east-1", CertCheck: 200 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	go func() { runErr = reposerver.Run(ctx, cfg, logr.Discard()); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(ca.Cert))
	served := func() (*x509.Certificate, int) {
		c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
		resp, err := c.Get("https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + "/" + reposerver.Bucket)
		if err != nil {
			return nil, 0
		}
		defer resp.Body.Close()
		return resp.TLS.PeerCertificates[0], resp.StatusCode
	}
	require.Eventually(t, func() bool { c, _ := served(); return c != nil }, 30*time.Second, 100*time.Millisecond, "the server answers")
	cert, status := served()
	assert.Equal(t, first.SerialNumber, cert.SerialNumber)
	assert.Equal(t, http.StatusForbidden, status, "an anonymous request is refused")
	_, err = os.Stat(filepath.Join(cfg.Dir, "data", reposerver.Bucket))
	require.NoError(t, err, "the bucket's directory")

	second := issue()
	require.Eventually(t, func() bool { c, _ := served(); return c != nil && c.SerialNumber.Cmp(second.SerialNumber) == 0 },
		10*time.Second, 100*time.Millisecond, "the renewed certificate served without a restart")
	cancel()
	select {
	case <-done:
		assert.NoError(t, runErr)
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not stop on SIGTERM")
	}
}
