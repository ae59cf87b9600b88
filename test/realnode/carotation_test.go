package realnode

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
)

// TestCARotationWithoutFailedQuery rotates the CA of a Database of two
// instances with a one-minute overlap while a client pod opens a new
// verify-full connection every 200 ms with the credentials Secret's
// ca.crt as the kubelet updates it: no query fails; the standby streams
// throughout and afterwards; the manager and the superuser log in with
// certificates of the new CA; and a superuser certificate signed with the
// old CA's key (the one a rotation is for: a key that leaked) is refused
// once the rotation is done.
func TestCARotationWithoutFailedQuery(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startOperator(t, ns)
	overlap := time.Minute
	db := replicated(ns, "rotca", 2)
	db.Spec.TLS = &dbv1.TLSSpec{CARotationOverlap: &metav1.Duration{Duration: overlap}}
	create(t, db)
	waitReady(t, db)
	waitTopology(t, db, resources.InstanceName(db, 0), 2)
	oldCA := pki.KeyPair{
		Cert: []byte(secretValue(t, ns, resources.CASecretName(db), resources.CACertKey)),
		Key:  []byte(secretValue(t, ns, resources.CASecretName(db), resources.CAKeyKey)),
	}
	rw := serviceTarget(t, db, resources.ClientServiceName(db))
	sqlValue(t, rw, "CREATE TABLE rotation (id int)")

	const window = 200
	script := `end=$((SECONDS+$1)) ok=0 failed=0
while (( SECONDS < end )); do
	if out=$(psql "$PGURI" --no-psqlrc --no-password -At --set=ON_ERROR_STOP=1 --command="` + sslQuery + `" 2>&1) && [[ $out == t ]]; then
		ok=$((ok+1))
	else
		failed=$((failed+1)); echo "failed at $(date -u +%T): $out"
	fi
	sleep 0.2
done
echo "ok=$ok failed=$failed"`
	conn := generated(db)
	type result struct {
		out string
		err error
	}
	client := make(chan result, 1)
	go func() {
		out, err := psql.RunWithCA(context.Background(), ns, conn.Secret, envOf(conn), script, []string{fmt.Sprint(window)}, (window+90)*time.Second)
		client <- result{out, err}
	}()
	time.Sleep(10 * time.Second) // the client pod runs

	started := time.Now()
	dbtest.Patch(t, k8s, db, func(d *dbv1.Database) {
		d.Annotations = map[string]string{dbv1.AnnotationRotateCA: "leaked-1"}
	})
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		st := dbtest.Get(ct, k8s, db).Status.TLS
		if assert.NotNil(ct, st) && assert.NotNil(ct, st.CARotation, "status.tls.caRotation") {
			assert.Equal(ct, dbv1.CARotationDone, st.CARotation.Phase)
		}
	}, 2*overlap+2*time.Minute, time.Second)
	t.Logf("rotation done after %s", time.Since(started).Round(time.Second))
	newCA := secretValue(t, ns, resources.CASecretName(db), resources.CACertKey)
	assert.NotEqual(t, string(oldCA.Cert), newCA, "the CA did not change")
	assert.Equal(t, newCA, secretValue(t, ns, resources.TLSSecretName(db), resources.CACertKey), "ca.crt holds the new CA only")

	res := <-client
	require.NoError(t, res.err, res.out)
	t.Logf("client: %s", lastLine(res.out))
	assert.Contains(t, res.out, " failed=0", "queries failed across the rotation:\n%s", res.out)

	// replication, the manager's and the superuser's logins, on the new CA
	// (a client reads ca.crt again, as the client pod did)
	rw = serviceTarget(t, db, resources.ClientServiceName(db))
	sqlValue(t, rw, "INSERT INTO rotation VALUES (1)")
	waitTopology(t, db, resources.InstanceName(db, 0), 2)
	ro := serviceTarget(t, db, resources.ReadOnlyServiceName(db))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		v, err := sqlOnce(ro, "SELECT count(*) FROM rotation")
		assert.NoError(ct, err)
		assert.Equal(ct, "1", v, "the standby has the row written after the rotation")
	}, timeout, time.Second)
	assert.Equal(t, "on", sqlValue(t, superuserTarget(t, db, rw), "SHOW is_superuser"))

	// a superuser certificate of the old CA's key: refused once the pods'
	// ca.crt no longer holds it (the kubelet's update, then a reload)
	leaked := superuserTarget(t, db, rw)
	pair, err := pki.IssueClient(oldCA, leaked.User, time.Now(), time.Hour)
	require.NoError(t, err)
	cert, err := tls.X509KeyPair(pair.Cert, pair.Key)
	require.NoError(t, err)
	leaked.TLS.Certificates = []tls.Certificate{cert}
	// the server's certificate is the new CA's: verify it with the new ca.crt
	verify, err := pki.ClientConfig([]byte(newCA), leaked.TLS.ServerName)
	require.NoError(t, err)
	leaked.TLS.RootCAs = verify.RootCAs
	require.Eventually(t, func() bool {
		_, err := sqlOnce(leaked, "SELECT 1")
		return err != nil && (strings.Contains(err.Error(), "certificate") || sqlconn.AuthFailed(err))
	}, 3*time.Minute, 2*time.Second, "a certificate of the old CA still logs the superuser in")
	assertNothingSecret(t, db)
}
