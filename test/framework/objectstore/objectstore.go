// Package objectstore runs a real S3-compatible object store for the tests
// and the demo: versitygw (the Versity S3 Gateway, github.com/versity/versitygw)
// with its posix backend, as a host process serving HTTPS with a certificate
// of its own CA. It holds the pgBackRest repositories (WAL archive and base
// backups) of PostgreSQL instances in pods on the local real node, which
// reach it at the host side of the node's bridge (198.18.0.1), while tests
// on the host reach it at 127.0.0.1.
//
// Why versitygw: it is an S3 gateway people run in production (not a mock),
// Apache-2.0, a single Go binary built from the Go module proxy like the
// other test tools (test/tools/versitygw, `make tools`), and its posix
// backend keeps a bucket as a directory and an object as a file under
// <Dir>/data/<bucket>/<key>. So this package needs no S3 client: it creates
// buckets, lists and corrupts objects on the file system, and the main module
// gains no AWS dependency.
//
// # pgBackRest 2.45 against it
//
// Measured with pgBackRest 2.45 (Debian bookworm) and versitygw v1.8.0;
// TestPgBackRestRoundTrip holds the option set, ERRORS.md what pgBackRest
// prints when the store is misconfigured, stopped or paused.
//
// pgBackRest 2.45 ignores IP-address SANs. It compares the host it connects
// to, as text, with the certificate's DNS SANs (with the common name only
// when there are no SANs): with only the IP SAN 127.0.0.1,
// repo1-s3-endpoint=127.0.0.1 fails with "[095]: unable to find hostname
// '127.0.0.1' in certificate common name or subject alternative names".
// repo1-storage-host (2.45 has it; deprecated name repo1-s3-host) does not
// help: pgBackRest then verifies the certificate against the storage host,
// not the endpoint. So the server certificate carries each address both as
// an IP SAN (for other clients) and as a DNS SAN (for pgBackRest), and a pod
// is configured with the address itself, no name to resolve:
//
//	repo1-type=s3
//	repo1-s3-endpoint=198.18.0.1      (127.0.0.1 on the host)
//	repo1-storage-port=<port>
//	repo1-storage-ca-file=<file with Store.CA>
//	repo1-s3-uri-style=path
//	repo1-s3-region=us-east-1
//	repo1-s3-bucket, repo1-s3-key, repo1-s3-key-secret, repo1-path
//
// repo1-s3-endpoint=s3.dbkeeper.test (DNSName) works too where the name
// resolves to the store (a pod's hostAliases), and =localhost on the host.
// pgBackRest refuses repo1-s3-key and repo1-s3-key-secret on its command
// line; they go in its configuration file or environment
// (PGBACKREST_REPO1_S3_KEY_SECRET).
package objectstore

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dbkeeper/dbkeeper/test/framework"
	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
)

const (
	// DNSName is the store's name in its certificate, beside localhost and
	// its addresses (as IP and as DNS SANs, for pgBackRest: see the package
	// comment). Nothing resolves it unless told (a pod's hostAliases).
	DNSName = "s3.dbkeeper.test"
	// Region is the store's region.
	Region = "us-east-1"
)

// tmpDir is the directory in each bucket where versitygw's posix backend
// keeps uploads in progress.
const tmpDir = ".sgwtmp"

// Options change how Start runs the store.
type Options struct {
	// Bin is the versitygw binary; default versitygw in the tools bin dir
	// (envtest.AssetsDir, filled by `make tools`).
	Bin string
	// Dir holds the store's state: data/ (the buckets), ca.crt, tls.crt,
	// tls.key and versitygw.log. Default a new temporary directory, which
	// Stop removes; a given Dir is kept.
	Dir string
	// Addr is the listen address, "host:port": default 127.0.0.1 and a
	// free port. When host is an IP address other than a loopback one (the
	// bridge's 198.18.0.1), the store listens on 127.0.0.1 with the same
	// port too (Store.Local).
	Addr string
	// DNSNames are more names of the store its certificate carries, such
	// as the in-cluster name Publish gives it.
	DNSNames []string
}

// Store is a running versitygw.
type Store struct {
	// Endpoint is where the store listens, "host:port" (Options.Addr).
	Endpoint string
	// Local is where the host reaches the store: 127.0.0.1:<port>.
	Local string
	// AccessKey and SecretKey are the root user's credentials.
	AccessKey, SecretKey string
	// CA is the PEM certificate of the CA that signed the server
	// certificate; CAFile is a world-readable file with it.
	CA     []byte
	CAFile string
	// Region is the store's region (Region).
	Region string
	// Dir is the state directory (Options.Dir).
	Dir string

	ownDir   bool
	cmd      *exec.Cmd
	done     chan struct{}
	err      error // of cmd.Wait, once done is closed
	stopOnce sync.Once
	stopErr  error
}

// Start starts versitygw serving HTTPS at opts.Addr with a fresh CA,
// server certificate and root credentials, and returns once it answers. On
// error nothing is left running.
func Start(ctx context.Context, opts Options) (*Store, error) {
	bin := opts.Bin
	if bin == "" {
		dir, err := envtest.AssetsDir()
		if err != nil {
			return nil, err
		}
		bin = filepath.Join(dir, "versitygw")
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("versitygw: %w (run `make tools`)", err)
	}
	s := &Store{Endpoint: opts.Addr, Region: Region, Dir: opts.Dir, done: make(chan struct{})}
	if s.Endpoint == "" {
		port, err := framework.FreePort()
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		s.Endpoint = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	host, port, err := net.SplitHostPort(s.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: %w", s.Endpoint, err)
	}
	s.Local = net.JoinHostPort("127.0.0.1", port)
	listen := []string{s.Endpoint}
	if ip := net.ParseIP(host); ip != nil && !ip.IsLoopback() && !ip.IsUnspecified() {
		listen = append(listen, s.Local)
	}
	if s.Dir == "" {
		if s.Dir, err = os.MkdirTemp("", "dbkeeper-s3-"); err != nil {
			return nil, fmt.Errorf("creating the store's directory: %w", err)
		}
		s.ownDir = true
	} else if s.Dir, err = filepath.Abs(s.Dir); err != nil { // versitygw changes into its data directory
		return nil, err
	} else if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the store's directory: %w", err)
	}
	ok := false
	defer func() {
		if !ok && s.ownDir {
			os.RemoveAll(s.Dir)
		}
	}()
	// world-readable, like the CA file in it, for pgBackRest running as the
	// postgres user; the key and data directory are not.
	if err := os.Chmod(s.Dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(s.dataDir(), 0o700); err != nil {
		return nil, fmt.Errorf("creating the store's data directory: %w", err)
	}
	if s.CA, err = writeTLS(s.Dir, host, opts.DNSNames); err != nil {
		return nil, err
	}
	s.CAFile = filepath.Join(s.Dir, "ca.crt")
	s.AccessKey, s.SecretKey = strings.ToUpper(randomHex(10)), randomHex(20)

	args := []string{"--cert", filepath.Join(s.Dir, "tls.crt"), "--key", filepath.Join(s.Dir, "tls.key"), "--region", s.Region}
	for _, l := range listen {
		args = append(args, "--port", l)
	}
	args = append(args, "posix", s.dataDir())
	if err := s.start(bin, args); err != nil {
		return nil, err
	}
	if err := s.waitReady(ctx, listen); err != nil {
		return nil, errors.Join(err, s.kill())
	}
	ok = true
	return s, nil
}

// start starts versitygw with its output in <Dir>/versitygw.log; the
// credentials go in its environment, not its arguments. It dies with this
// process (framework.SysProcAttr).
func (s *Store) start(bin string, args []string) error {
	logFile, err := os.Create(s.LogPath())
	if err != nil {
		return fmt.Errorf("creating the log of versitygw: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+s.AccessKey, "ROOT_SECRET_ACCESS_KEY="+s.SecretKey)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = framework.SysProcAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting versitygw: %w", err)
	}
	s.cmd = cmd
	go func() {
		s.err = cmd.Wait()
		logFile.Close()
		close(s.done)
	}()
	return nil
}

// waitReady waits until every listen address answers an HTTPS request
// (with any status: anonymous requests are refused) verified with the CA.
func (s *Store) waitReady(ctx context.Context, listen []string) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.CA)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: DNSName},
	}}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, addr := range listen {
		for {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/", nil)
			if err != nil {
				return err
			}
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
				break
			}
			select {
			case <-s.done:
				return fmt.Errorf("versitygw exited: %v\n%s", s.err, s.Log())
			case <-ctx.Done():
				return fmt.Errorf("versitygw not answering at %s: %v\n%s", addr, err, s.Log())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// LogPath is versitygw's log: its output, one line per request.
func (s *Store) LogPath() string { return filepath.Join(s.Dir, "versitygw.log") }

// Log returns versitygw's log.
func (s *Store) Log() string {
	data, _ := os.ReadFile(s.LogPath())
	return string(data)
}

func (s *Store) dataDir() string { return filepath.Join(s.Dir, "data") }

// Pause stops the store's process (SIGSTOP): connections are accepted by
// the kernel but nothing answers, as with a store that hangs.
func (s *Store) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues the store's process after Pause (SIGCONT).
func (s *Store) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Store) signal(sig syscall.Signal) error {
	select {
	case <-s.done:
		return fmt.Errorf("versitygw (pid %d) has exited: %v", s.cmd.Process.Pid, s.err)
	default:
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signalling versitygw (pid %d): %w", s.cmd.Process.Pid, err)
	}
	return nil
}

// Stop stops the store's process (SIGTERM, SIGKILL after 10 s; a paused
// one is continued first), waits for it, and removes Dir if Start created
// it. It returns nil when called again.
func (s *Store) Stop() error {
	s.stopOnce.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			s.stopErr = s.kill()
		}
		if s.ownDir {
			s.stopErr = errors.Join(s.stopErr, os.RemoveAll(s.Dir))
		}
	})
	return s.stopErr
}

// kill kills the store's process and waits for it.
func (s *Store) kill() error {
	err := s.cmd.Process.Kill()
	<-s.done
	if errors.Is(err, os.ErrProcessDone) {
		err = nil
	}
	return err
}

// CreateBucket creates the bucket name, owned by the root user, as
// versitygw's CreateBucket does: a directory with the acl and ownership
// attributes.
func (s *Store) CreateBucket(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dir, err := s.path(name, "")
	if err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("creating bucket %s: %w", name, err)
	}
	type grantee struct{ Permission, Access, Type string }
	acl, err := json.Marshal(struct {
		Owner    string
		Grantees []grantee
	}{s.AccessKey, []grantee{{"FULL_CONTROL", s.AccessKey, "CanonicalUser"}}})
	if err != nil {
		return err
	}
	for attr, value := range map[string][]byte{"user.acl": acl, "user.ownership": []byte("BucketOwnerEnforced")} {
		if err := syscall.Setxattr(dir, attr, value, 0); err != nil {
			return errors.Join(fmt.Errorf("setting %s of bucket %s: %w", attr, name, err), os.Remove(dir))
		}
	}
	return nil
}

// List returns the keys of the objects in bucket that start with prefix,
// sorted.
func (s *Store) List(ctx context.Context, bucket, prefix string) ([]string, error) {
	root, err := s.path(bucket, "")
	if err != nil {
		return nil, err
	}
	var keys []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() && d.Name() == tmpDir && filepath.Dir(path) == root {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		key, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if key = filepath.ToSlash(key); strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing bucket %s: %w", bucket, err)
	}
	sort.Strings(keys)
	return keys, nil
}

// Corrupt changes the object's content in place (its middle byte inverted;
// size and metadata kept, so its ETag lies): for a test that a backup
// verification finds the corruption.
func (s *Store) Corrupt(ctx context.Context, bucket, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	path, err := s.path(bucket, key)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("corrupting %s/%s: %w", bucket, key, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if info.Size() == 0 {
		return fmt.Errorf("corrupting %s/%s: the object is empty", bucket, key)
	}
	b := make([]byte, 1)
	off := info.Size() / 2
	if _, err := f.ReadAt(b, off); err != nil {
		return fmt.Errorf("corrupting %s/%s: %w", bucket, key, err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		return fmt.Errorf("corrupting %s/%s: %w", bucket, key, err)
	}
	return f.Close()
}

// path is the file of the object key in bucket (the bucket's directory for
// an empty key); it refuses names that leave the bucket.
func (s *Store) path(bucket, key string) (string, error) {
	if bucket == "" || strings.ContainsAny(bucket, `/\`) || bucket == "." || bucket == ".." {
		return "", fmt.Errorf("invalid bucket name %q", bucket)
	}
	p := filepath.Join(s.dataDir(), bucket, filepath.FromSlash(key))
	if key != "" && !strings.HasPrefix(p, filepath.Join(s.dataDir(), bucket)+string(filepath.Separator)) {
		return "", fmt.Errorf("invalid key %q", key)
	}
	return p, nil
}

// writeTLS writes <dir>/ca.crt (0644), tls.crt and tls.key: a new CA and a
// server certificate it signs for host (the listen host), 127.0.0.1,
// localhost, DNSName and names. It returns the CA's PEM.
func writeTLS(dir, host string, names []string) ([]byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "dbkeeper-s3-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(30 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("creating the CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the server key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: DNSName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(30 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     append([]string{DNSName, "localhost"}, names...),
	}
	ips := []net.IP{net.IPv4(127, 0, 0, 1)}
	if ip := net.ParseIP(host); ip != nil {
		if !ip.Equal(ips[0]) && !ip.IsUnspecified() {
			ips = append(ips, ip)
		}
	} else if host != "" && host != "localhost" && host != DNSName {
		tmpl.DNSNames = append(tmpl.DNSNames, host)
	}
	// pgBackRest 2.45 ignores IP SANs and compares the address it connects
	// to with the DNS SANs as text, so each address is a DNS SAN too.
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		tmpl.DNSNames = append(tmpl.DNSNames, ip.String())
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("creating the server certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{"ca.crt", caPEM, 0o644},
		{"tls.crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644},
		{"tls.key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600},
	} {
		if err := os.WriteFile(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return nil, fmt.Errorf("writing %s: %w", f.name, err)
		}
	}
	return caPEM, nil
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
