package tls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
	"github.com/dbkeeper/dbkeeper/test/framework/postgres"
)

// TestProbeAndReloadOnALocalServer runs a local PostgreSQL with the
// engine's TLS arguments and the agent's client certificate rules, and
// renews its certificate as the controller does: new files in place, the
// probe sees the old serial, SuperuserReloader reloads (logging in with a
// certificate it signs), the probe sees the new one, while a client opens
// a new verify-full connection every 50 ms and never fails; the postmaster
// never restarts, plaintext is refused, and so is the superuser's
// password without a certificate.
func TestProbeAndReloadOnALocalServer(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a local PostgreSQL server")
	}
	if _, err := postgres.BinDir(); err != nil {
		t.Skip(err)
	}
	db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop"}}
	now := time.Now()
	ca, err := pki.NewCA("orders CA", now)
	require.NoError(t, err)
	first, err := pki.IssueServer(ca, resources.ServerDNSNames(db), now, time.Hour)
	require.NoError(t, err)

	var certFile, keyFile string
	write := func(pair pki.KeyPair, uid, gid int) {
		for file, data := range map[string][]byte{certFile: pair.Cert, keyFile: pair.Key} {
			tmp := file + ".new"
			require.NoError(t, os.WriteFile(tmp, data, 0o600))
			require.NoError(t, os.Chown(tmp, uid, gid))
			require.NoError(t, os.Rename(tmp, file))
		}
	}
	var owner [2]int
	srv := postgres.StartWith(t, postgres.Options{Prepare: func(dir string, uid, gid int) []string {
		owner = [2]int{uid, gid}
		certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
		hba, ident, caFile := filepath.Join(dir, "pg_hba.conf"), filepath.Join(dir, "pg_ident.conf"), filepath.Join(dir, "ca.crt")
		write(first, uid, gid)
		pg := engine.Postgres{}
		require.NoError(t, os.WriteFile(hba, []byte(pg.CertAuthHBA(postgres.Superuser)), 0o644))
		require.NoError(t, os.WriteFile(ident, []byte(pg.CertAuthIdent(resources.ClientServiceName(db))), 0o644))
		require.NoError(t, os.WriteFile(caFile, ca.Cert, 0o644))
		return append(pg.TLSArgs(certFile, keyFile, ""), pg.CertAuthArgs(caFile, hba, ident)...)
	}})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(srv.Port))
	ctx := context.Background()

	served, err := PostgresProber{}.Served(ctx, addr)
	require.NoError(t, err)
	firstCert, _ := pki.ParseCertificate(first.Cert)
	assert.Equal(t, pki.Serial(firstCert), pki.Serial(served), "serves the first certificate")
	started := srv.SQL(t, "postgres", "SELECT pg_postmaster_start_time()")

	// Plaintext TCP is refused by the rules; TLS with verify-full works.
	psql := func(conninfo string) (string, error) {
		cmd := exec.Command(filepath.Join(srv.Bin, "psql"), "--no-psqlrc", "-At", "-c", "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", conninfo)
		cmd.Env = append(os.Environ(), srv.Env(postgres.Superuser, srv.Password)...)
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	out, err := psql("sslmode=disable")
	require.Error(t, err)
	assert.Contains(t, out, "no encryption")

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.Cert)
	target := sqlconn.Target{Host: "127.0.0.1", Port: int32(srv.Port), User: postgres.Superuser, Password: srv.Password, Database: "postgres",
		TLS: &tls.Config{RootCAs: roots, ServerName: resources.ClientServiceHost(db), MinVersion: tls.VersionTLS12}}
	// The superuser's password alone is refused over TCP.
	_, err = sqlconn.Connect(ctx, target)
	require.Error(t, err, "the superuser logged in with its password over TCP")
	assert.Contains(t, err.Error(), "certificate")
	caSecret := resources.CASecret(db, ca.Cert, ca.Key)
	require.NoError(t, instance.SuperuserCertificate(ctx, fake.NewClientBuilder().WithObjects(caSecret).Build(), db,
		instance.Login{User: postgres.Superuser, Superuser: true}, target.TLS))

	// A client that opens a new verified connection for every query.
	var queries, failures atomic.Int64
	var failed sync.Map
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			err := func() error {
				c, err := sqlconn.Connect(ctx, target)
				if err != nil {
					return err
				}
				defer c.Close(ctx)
				v, _, err := c.QueryValue(ctx, "SELECT ssl::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
				if err == nil && (v == nil || *v != "true") {
					err = fmt.Errorf("ssl is %v", v)
				}
				return err
			}()
			queries.Add(1)
			if err != nil {
				failures.Add(1)
				failed.Store(err.Error(), true)
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)

	second, err := pki.IssueServer(ca, resources.ServerDNSNames(db), time.Now(), time.Hour)
	require.NoError(t, err)
	write(second, owner[0], owner[1])
	served, err = PostgresProber{}.Served(ctx, addr)
	require.NoError(t, err)
	assert.Equal(t, pki.Serial(firstCert), pki.Serial(served), "the files alone change nothing")

	superuser := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: resources.SuperuserSecretName(db), Namespace: db.Namespace},
		Data: map[string][]byte{engine.UsernameKey: []byte(postgres.Superuser), engine.PasswordKey: []byte(srv.Password)}}
	reloader := SuperuserReloader{Reader: fake.NewClientBuilder().WithObjects(superuser, resources.CASecret(db, ca.Cert, ca.Key)).Build()}
	// The reloader verifies the server for pod 0's name, as the controller
	// reaches it by its IP.
	require.NoError(t, reloader.Reload(ctx, db, "127.0.0.1", int32(srv.Port), ca.Cert))
	secondCert, _ := pki.ParseCertificate(second.Cert)
	require.Eventually(t, func() bool {
		served, err := PostgresProber{}.Served(ctx, addr)
		return err == nil && pki.Serial(served) == pki.Serial(secondCert)
	}, 10*time.Second, 50*time.Millisecond, "the server serves the second certificate after the reload")
	time.Sleep(300 * time.Millisecond)
	close(stop)
	<-done

	var errs []string
	failed.Range(func(k, _ any) bool { errs = append(errs, k.(string)); return true })
	t.Logf("%d queries over new verify-full connections across the renewal, %d failed", queries.Load(), failures.Load())
	assert.Zero(t, failures.Load(), "failed queries: %v", errs)
	assert.Greater(t, queries.Load(), int64(5))
	assert.Equal(t, started, srv.SQL(t, "postgres", "SELECT pg_postmaster_start_time()"), "the server did not restart")
	out, err = psql("sslmode=verify-full sslrootcert=" + writeTemp(t, ca.Cert) + " host=" + "localhost")
	require.Error(t, err, "localhost is not among the certificate's names")
	assert.Contains(t, out, "does not match host name")
}

func writeTemp(t *testing.T, data []byte) string {
	f := filepath.Join(t.TempDir(), "ca.crt")
	require.NoError(t, os.WriteFile(f, data, 0o644))
	return f
}
