package pki

import (
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"
)

var names = []string{"orders", "orders.shop.svc", "*.orders-headless.shop.svc"}

func TestIssueServerVerifies(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	ca, err := NewCA("orders CA", now)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := IssueServer(ca, names, now, 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := CheckServer(srv, ca.Cert, append(names, "orders-0.orders-headless.shop.svc"), now)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "orders" || len(cert.DNSNames) != 3 {
		t.Errorf("subject %q, SANs %v", cert.Subject.CommonName, cert.DNSNames)
	}
	if _, err := tls.X509KeyPair(srv.Cert, srv.Key); err != nil {
		t.Errorf("crypto/tls refuses the pair: %v", err)
	}
	// the instances present it to each other's pgBackRest TLS server.
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("not usable as a client certificate: %v", err)
	}
	if got, want := cert.NotAfter, now.Add(90*time.Second); !got.Equal(want) {
		t.Errorf("NotAfter %s, want %s", got, want)
	}
	// 9 s backdated (a tenth of 90 s): renewal 2/3 into 99 s, 57 s after now.
	if got, want := RenewalTime(cert), now.Add(57*time.Second); !got.Equal(want) {
		t.Errorf("RenewalTime %s, want %s", got, want)
	}
	long, _ := IssueServer(ca, names, now, DefaultLifetime)
	lc, _ := ParseCertificate(long.Cert)
	if got := lc.NotBefore; !got.Equal(now.Add(-time.Minute)) {
		t.Errorf("90-day NotBefore %s, want a minute before now", got)
	}
	if Serial(cert) == Serial(lc) || Serial(cert) == "" {
		t.Errorf("serials %s, %s", Serial(cert), Serial(lc))
	}
}

func TestCheckServerRefuses(t *testing.T) {
	now := time.Now()
	ca, _ := NewCA("a", now)
	other, _ := NewCA("b", now)
	srv, _ := IssueServer(ca, names, now, time.Hour)
	wrongKey, _ := IssueServer(ca, names, now, time.Hour)
	for name, tc := range map[string]struct {
		pair  KeyPair
		ca    []byte
		names []string
		now   time.Time
		want  string
	}{
		"other CA":     {srv, other.Cert, names, now, "does not verify"},
		"missing name": {srv, ca.Cert, []string{"orders.other.svc"}, now, "does not verify for orders.other.svc"},
		"expired":      {srv, ca.Cert, names, now.Add(2 * time.Hour), "expired"},
		"wrong key":    {KeyPair{srv.Cert, wrongKey.Key}, ca.Cert, names, now, "not the key"},
		"no cert":      {KeyPair{nil, srv.Key}, ca.Cert, names, now, "tls.crt"},
		"no CA":        {srv, []byte("x"), names, now, "ca.crt"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := CheckServer(tc.pair, tc.ca, tc.names, tc.now)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "PRIVATE") {
				t.Errorf("error quotes a key: %v", err)
			}
		})
	}
}

func TestCA(t *testing.T) {
	now := time.Now()
	ca, err := NewCA("orders CA", now)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ParseCertificate(ca.Cert)
	if err != nil {
		t.Fatal(err)
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("not a CA: IsCA %v, usage %v", cert.IsCA, cert.KeyUsage)
	}
	if _, err := IssueServer(KeyPair{ca.Cert, []byte("nope")}, names, now, time.Hour); err == nil {
		t.Error("issued with a broken CA key")
	}
	// A server certificate never outlives its CA.
	srv, err := IssueServer(ca, names, now, 2*CALifetime)
	if err != nil {
		t.Fatal(err)
	}
	sc, _ := ParseCertificate(srv.Cert)
	if sc.NotAfter.After(cert.NotAfter) {
		t.Errorf("server NotAfter %s after the CA's %s", sc.NotAfter, cert.NotAfter)
	}
}

// TestClientAuthUsable: a certificate with serverAuth only (dbkeeper's
// before backups from standbys) cannot be a TLS client's.
func TestClientAuthUsable(t *testing.T) {
	for _, c := range []struct {
		usages []x509.ExtKeyUsage
		want   bool
	}{
		{[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, false},
		{[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, true},
		{nil, true},
	} {
		if got := ClientAuthUsable(&x509.Certificate{ExtKeyUsage: c.usages}); got != c.want {
			t.Errorf("ClientAuthUsable(%v) = %v, want %v", c.usages, got, c.want)
		}
	}
}

// TestIssueClient: a client certificate names the role in its common
// name, chains to the CA for clientAuth only (it can serve nothing), and
// lives no longer than asked.
func TestIssueClient(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	ca, err := NewCA("orders CA", now)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := IssueClient(ca, "postgres", now, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ParseCertificate(pair.Cert)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "postgres" {
		t.Errorf("common name %q, want postgres", cert.Subject.CommonName)
	}
	if got := cert.NotAfter.Sub(now); got != 10*time.Minute {
		t.Errorf("valid for %s after now, want 10m", got)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("does not verify as a client's: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("verifies as a server's")
	}
	if _, err := tls.X509KeyPair(pair.Cert, pair.Key); err != nil {
		t.Errorf("not a usable key pair: %v", err)
	}
	if _, err := IssueClient(ca, "", now, time.Minute); err == nil {
		t.Error("issued a certificate without a common name")
	}
}
