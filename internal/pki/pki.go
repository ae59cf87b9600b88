// Package pki issues and checks the certificates of a Database's server: a
// CA of the Database's own and server certificates signed by it, ECDSA
// P-256 keys, PEM encoded. It is pure apart from the randomness of keys and
// serial numbers: the time comes from the caller, nothing is read from or
// written to the cluster, and no key is ever logged or put in an error.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"
)

// CALifetime is how long a Database's CA is valid. It is never renewed by
// dbkeeper (clients hold it in ca.crt); ten years.
const CALifetime = 10 * 365 * 24 * time.Hour

// DefaultLifetime is the default lifetime of a server certificate.
const DefaultLifetime = 90 * 24 * time.Hour

// maxBackdate is the most a certificate's NotBefore lies before its
// issuance, for clocks that run a little behind.
const maxBackdate = time.Minute

// KeyPair is a PEM-encoded certificate and its private key.
type KeyPair struct {
	// Cert is the PEM "CERTIFICATE" block.
	Cert []byte
	// Key is the PEM "PRIVATE KEY" (PKCS #8) block. Never log it.
	Key []byte
}

// NewCA makes a self-signed CA certificate and key, valid from now for
// CALifetime, with commonName as its subject.
func NewCA(commonName string, now time.Time) (KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, fmt.Errorf("generating CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return KeyPair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"dbkeeper"}},
		NotBefore:             now.Add(-maxBackdate),
		NotAfter:              now.Add(CALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("signing CA certificate: %w", err)
	}
	return encode(der, key)
}

// IssueServer signs a server certificate for dnsNames (the first is also
// its common name), usable by a TLS client too, with the CA, valid from
// now for lifetime (backdated by a tenth of it, at most a minute, for
// clocks that run behind).
func IssueServer(ca KeyPair, dnsNames []string, now time.Time, lifetime time.Duration) (KeyPair, error) {
	if len(dnsNames) == 0 {
		return KeyPair{}, errors.New("issuing a server certificate: no DNS names")
	}
	return issue(ca, "server", &x509.Certificate{
		Subject:  pkix.Name{CommonName: dnsNames[0]},
		DNSNames: dnsNames,
		// clientAuth too: the instances present it to each other's
		// pgBackRest TLS server (a base backup from a standby), and to
		// each other's PostgreSQL as the replication role.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}, now, lifetime)
}

// IssueClient signs a client certificate whose common name is commonName
// (the role it logs in as, for PostgreSQL's cert authentication) with the
// CA, valid from now for lifetime (backdated as IssueServer's); it can
// authenticate a client only.
func IssueClient(ca KeyPair, commonName string, now time.Time, lifetime time.Duration) (KeyPair, error) {
	if commonName == "" {
		return KeyPair{}, errors.New("issuing a client certificate: no common name")
	}
	return issue(ca, "client", &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, now, lifetime)
}

// issue signs tmpl's subject, names and extended key usages with the CA
// and a new key, valid from now for lifetime (no longer than the CA),
// backdated by a tenth of it, at most maxBackdate.
func issue(ca KeyPair, kind string, tmpl *x509.Certificate, now time.Time, lifetime time.Duration) (KeyPair, error) {
	if lifetime <= 0 {
		return KeyPair{}, fmt.Errorf("issuing a %s certificate: lifetime %s is not positive", kind, lifetime)
	}
	caCert, caKey, err := parseCA(ca)
	if err != nil {
		return KeyPair{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, fmt.Errorf("generating %s key: %w", kind, err)
	}
	if tmpl.SerialNumber, err = newSerial(); err != nil {
		return KeyPair{}, err
	}
	tmpl.NotBefore = now.Add(-min(maxBackdate, lifetime/10))
	tmpl.NotAfter = now.Add(lifetime)
	if tmpl.NotAfter.After(caCert.NotAfter) {
		tmpl.NotAfter = caCert.NotAfter
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.BasicConstraintsValid = true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return KeyPair{}, fmt.Errorf("signing %s certificate: %w", kind, err)
	}
	return encode(der, key)
}

// RenewalTime is when a certificate is due for renewal: two thirds into
// its validity.
func RenewalTime(cert *x509.Certificate) time.Time {
	life := cert.NotAfter.Sub(cert.NotBefore)
	return cert.NotBefore.Add(life * 2 / 3)
}

// ParseCertificate parses the first PEM certificate of data.
func ParseCertificate(data []byte) (*x509.Certificate, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, errors.New("no PEM CERTIFICATE block")
		}
		if block.Type == "CERTIFICATE" {
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("parsing certificate: %w", err)
			}
			return cert, nil
		}
	}
}

// Serial is a certificate's serial number as status shows it: lower-case
// hex.
func Serial(cert *x509.Certificate) string { return cert.SerialNumber.Text(16) }

// CheckServer verifies a server certificate: its key is the certificate's,
// it chains to a certificate of caPEM, it is valid at now and it names
// every one of dnsNames. The error says what is wrong, never quoting the
// key.
func CheckServer(pair KeyPair, caPEM []byte, dnsNames []string, now time.Time) (*x509.Certificate, error) {
	cert, err := ParseCertificate(pair.Cert)
	if err != nil {
		return nil, fmt.Errorf("tls.crt: %w", err)
	}
	if _, err := parseKey(pair.Key); err != nil {
		return nil, fmt.Errorf("tls.key: %w", err)
	}
	if !matches(cert, pair.Key) {
		return nil, errors.New("tls.key is not the key of tls.crt")
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("ca.crt holds no PEM certificate")
	}
	intermediates := x509.NewCertPool()
	intermediates.AppendCertsFromPEM(pair.Cert) // a chain after the leaf, as cert-manager may write
	for _, name := range dnsNames {
		_, err := cert.Verify(x509.VerifyOptions{
			DNSName: name, Roots: roots, Intermediates: intermediates, CurrentTime: now,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		if err != nil {
			return nil, fmt.Errorf("tls.crt does not verify for %s with ca.crt: %w", name, err)
		}
	}
	return cert, nil
}

// ClientAuthUsable says whether cert may authenticate a TLS client: it
// has no extended key usage (any), or clientAuth among them. Certificates
// dbkeeper issued before backups from standbys carry serverAuth only, and
// OpenSSL refuses them as a client's ("unsupported certificate").
func ClientAuthUsable(cert *x509.Certificate) bool {
	if len(cert.ExtKeyUsage) == 0 {
		return true
	}
	for _, u := range cert.ExtKeyUsage {
		if u == x509.ExtKeyUsageClientAuth || u == x509.ExtKeyUsageAny {
			return true
		}
	}
	return false
}

// matches reports whether the PEM private key is the key of cert.
func matches(cert *x509.Certificate, keyPEM []byte) bool {
	key, err := parseKey(keyPEM)
	if err != nil {
		return false
	}
	pub, ok := key.(crypto.Signer)
	if !ok {
		return false
	}
	eq, ok := pub.Public().(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(cert.PublicKey)
}

// parseKey parses a PKCS #8, SEC 1 (EC) or PKCS #1 (RSA) PEM key; errors
// never quote it.
func parseKey(keyPEM []byte) (any, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil || !strings.HasSuffix(block.Type, "PRIVATE KEY") {
		return nil, errors.New("no PEM PRIVATE KEY block")
	}
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	if k, err := x509.ParseECPrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	return nil, errors.New("unreadable private key (not PKCS #8, EC or PKCS #1)")
}

func parseCA(ca KeyPair) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cert, err := ParseCertificate(ca.Cert)
	if err != nil {
		return nil, nil, fmt.Errorf("CA ca.crt: %w", err)
	}
	if !cert.IsCA {
		return nil, nil, errors.New("CA ca.crt is not a CA certificate")
	}
	key, err := parseKey(ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("CA ca.key: %w", err)
	}
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok || !matches(cert, ca.Key) {
		return nil, nil, errors.New("CA ca.key is not the ECDSA key of ca.crt")
	}
	return cert, ec, nil
}

func encode(der []byte, key *ecdsa.PrivateKey) (KeyPair, error) {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("encoding private key: %w", err)
	}
	return KeyPair{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// newSerial is a random positive 128-bit serial number.
func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("generating a serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}

// ClientConfig is the TLS configuration of a client that verifies a server
// against caPEM for serverName (verify-full), whatever address it dials:
// the manager reaches servers by pod IP and verifies them by their pod's
// DNS name.
func ClientConfig(caPEM []byte, serverName string) (*tls.Config, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("the CA bundle holds no PEM certificate")
	}
	return &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}, nil
}
