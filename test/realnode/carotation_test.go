package realnode

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
	"github.com/dbkeeper/dbkeeper/test/framework/operator"
)

// TestTLSRenewalAndCARotationWithoutFailedQuery runs the operator with
// 90-second certificates and rotates the CA of a Database of two instances
// with a one-minute overlap, while a client pod opens a new verify-full
// connection every 200 ms with the credentials Secret's ca.crt as the
// kubelet updates it (verifyFullLoop), across renewals and every phase of
// the rotation: no query fails, the served certificate changes (each
// renewal and rotation step reloads the server) and the server never
// restarts; the standby streams throughout and afterwards; the manager
// and the superuser log in with certificates of the new CA; and a
// superuser certificate signed with the old CA's key (the one a rotation
// is for: a key that leaked) is refused once the rotation is done.
func TestTLSRenewalAndCARotationWithoutFailedQuery(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	operator.Start(t, local.Config, operator.Options{
		Namespaces:      []string{ns},
		Engines:         images,
		Logger:          operator.FileLogger(t, 60),
		TLSCertDuration: 90 * time.Second,
		RealInstances:   true,
		AgentImage:      local.ManagerImage(),
	})
	overlap := time.Minute
	db := replicated(ns, "rotca", 2)
	db.Spec.TLS = &dbv1.TLSSpec{CARotationOverlap: &metav1.Duration{Duration: overlap}}
	create(t, db)
	waitReady(t, db)
	waitTopology(t, db, resources.InstanceName(db, 0), 2)
	waitCondition(t, db, dbv1.ConditionTLSReady, metav1.ConditionTrue, dbv1.ReasonTLSReady)
	oldCA := pki.KeyPair{
		Cert: []byte(secretValue(t, ns, resources.CASecretName(db), resources.CACertKey)),
		Key:  []byte(secretValue(t, ns, resources.CASecretName(db), resources.CAKeyKey)),
	}
	conn := generated(db)
	started := queryEventually(t, conn, "SELECT pg_postmaster_start_time()")
	rw := serviceTarget(t, db, resources.ClientServiceName(db))
	sqlValue(t, rw, "CREATE TABLE rotation (id int)")

	// Every distinct served serial, as the operator sees them.
	var mu sync.Mutex
	served := map[string]bool{}
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
			cur := &dbv1.Database{}
			if k8s.Get(context.Background(), client.ObjectKeyFromObject(db), cur) != nil {
				continue
			}
			if st := cur.Status.TLS; st != nil && st.ServedSerialNumber != "" {
				mu.Lock()
				if !served[st.ServedSerialNumber] {
					t.Logf("%s: served serial %s (Secret's %s)", time.Now().Format(time.TimeOnly), st.ServedSerialNumber, st.SerialNumber)
				}
				served[st.ServedSerialNumber] = true
				mu.Unlock()
			}
		}
	}()
	const window = 200
	type result struct {
		out string
		err error
	}
	client := make(chan result, 1)
	go func() {
		out, err := psql.RunWithCA(context.Background(), ns, conn.Secret, envOf(conn), verifyFullLoop, []string{fmt.Sprint(window)}, (window+90)*time.Second)
		client <- result{out, err}
	}()
	time.Sleep(10 * time.Second) // the client pod runs

	rotating := time.Now()
	dbtest.Patch(t, k8s, db, func(d *dbv1.Database) {
		d.Annotations = map[string]string{dbv1.AnnotationRotateCA: "leaked-1"}
	})
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		st := dbtest.Get(ct, k8s, db).Status.TLS
		if assert.NotNil(ct, st) && assert.NotNil(ct, st.CARotation, "status.tls.caRotation") {
			assert.Equal(ct, dbv1.CARotationDone, st.CARotation.Phase)
		}
	}, 2*overlap+2*time.Minute, time.Second)
	t.Logf("rotation done after %s", time.Since(rotating).Round(time.Second))
	newCA := secretValue(t, ns, resources.CASecretName(db), resources.CACertKey)
	assert.NotEqual(t, string(oldCA.Cert), newCA, "the CA did not change")
	assert.Equal(t, newCA, secretValue(t, ns, resources.TLSSecretName(db), resources.CACertKey), "ca.crt holds the new CA only")

	res := <-client
	close(stop)
	<-watched
	require.NoError(t, res.err, res.out)
	t.Logf("client: %s", lastLine(res.out))
	assert.Contains(t, res.out, " failed=0", "queries failed across the renewals and the rotation:\n%s", res.out)
	assert.NotContains(t, res.out, "ok=0 ")
	mu.Lock()
	assert.GreaterOrEqual(t, len(served), 3, "the served certificate changed with the renewals and the rotation: %v", served)
	mu.Unlock()
	assert.Equal(t, started, query(t, conn, "SELECT pg_postmaster_start_time()"), "the server restarted")

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
	require.Eventually(t, func() bool {
		_, err := sqlOnce(leaked, "SELECT 1")
		return err != nil && (strings.Contains(err.Error(), "certificate") || sqlconn.AuthFailed(err))
	}, 3*time.Minute, 2*time.Second, "a certificate of the old CA still logs the superuser in")
	assertNothingSecret(t, db)
}
