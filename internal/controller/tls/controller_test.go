package tls

import (
	"context"
	cryptotls "crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// fakeProber serves cert, or err.
type fakeProber struct {
	cert *x509.Certificate
	err  error
}

func (p *fakeProber) Served(context.Context, string) (*x509.Certificate, error) { return p.cert, p.err }

// fakeReloader counts reloads.
type fakeReloader struct{ reloads int }

func (r *fakeReloader) Reload(context.Context, *dbv1.Database, string, int32, []byte) error {
	r.reloads++
	return nil
}

type fixture struct {
	c        client.Client
	s        *syncer
	now      time.Time
	prober   *fakeProber
	reloader *fakeReloader
	events   *events.FakeRecorder
}

func newFixture(t *testing.T, objs ...client.Object) *fixture {
	c := facettest.Client(t, objs...)
	f := &fixture{c: c, now: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC), prober: &fakeProber{}, reloader: &fakeReloader{},
		events: events.NewFakeRecorder(20)}
	f.s = &syncer{client: c, reader: c, writer: facet.WriterFor(c, f.events, Name), lifetime: 90 * time.Second,
		now: func() time.Time { return f.now }, prober: f.prober, reloader: f.reloader}
	return f
}

func (f *fixture) secret(t *testing.T, name string) *corev1.Secret {
	sec := &corev1.Secret{}
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: name}, sec))
	return sec
}

func (f *fixture) sync(t *testing.T, db *dbv1.Database) facet.Outcome {
	out, err := f.s.Sync(context.Background(), db)
	require.NoError(t, err)
	return out
}

func readyPod(db *dbv1.Database) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: db.Name + "-0", Labels: resources.PodSelectorLabels(db)},
		Status:     corev1.PodStatus{PodIP: "198.18.0.20", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

// TestIssueAndRenew: a new Database gets a CA, a certificate for its names
// and the pg_hba ConfigMap; a second sync changes nothing; at the renewal
// time the certificate is reissued from the same CA.
func TestIssueAndRenew(t *testing.T) {
	db := facettest.Database()
	f := newFixture(t, db)
	out := f.sync(t, db)
	assert.Equal(t, metav1.ConditionTrue, out.Condition.Status)
	assert.Equal(t, dbv1.ReasonTLSReady, out.Condition.Reason, out.Condition.Message)

	ca := f.secret(t, resources.CASecretName(db))
	srv := f.secret(t, resources.TLSSecretName(db))
	assert.Equal(t, corev1.SecretTypeTLS, srv.Type)
	assert.Equal(t, ca.Data[resources.CACertKey], srv.Data[resources.CACertKey])
	cert, err := pki.CheckServer(pki.KeyPair{Cert: srv.Data["tls.crt"], Key: srv.Data["tls.key"]}, ca.Data[resources.CACertKey],
		resources.ServerDNSNames(db), f.now)
	require.NoError(t, err)
	assert.Equal(t, pki.Serial(cert), *out.Status.TLS.SerialNumber)
	assert.Equal(t, resources.TLSSecretName(db), *out.Status.TLS.SecretName)
	assert.Equal(t, pki.RenewalTime(cert).Sub(f.now), out.RequeueAfter)
	cm := &corev1.ConfigMap{}
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: resources.HBAConfigMapName(db)}, cm))
	assert.Contains(t, cm.Data["pg_hba.conf"], "hostssl")
	for _, m := range []string{out.Condition.Message} {
		assert.NotContains(t, m, "PRIVATE")
	}

	out = f.sync(t, db)
	assert.Equal(t, pki.Serial(cert), *out.Status.TLS.SerialNumber, "no reissue before the renewal time")

	f.now = pki.RenewalTime(cert).Add(time.Second)
	out = f.sync(t, db)
	assert.NotEqual(t, pki.Serial(cert), *out.Status.TLS.SerialNumber, "renewed")
	assert.Equal(t, ca.Data, f.secret(t, resources.CASecretName(db)).Data, "the CA is kept")
	renewed := f.secret(t, resources.TLSSecretName(db))
	_, err = pki.CheckServer(pki.KeyPair{Cert: renewed.Data["tls.crt"], Key: renewed.Data["tls.key"]}, ca.Data[resources.CACertKey],
		resources.ServerDNSNames(db), f.now)
	require.NoError(t, err)
	close(f.events.Events)
	for e := range f.events.Events {
		assert.NotContains(t, e, "PRIVATE", "an Event holds a key")
	}
}

// TestReloadUntilServed: the server serving another certificate than the
// Secret's is asked to reload, and looked at again soon; once it serves
// the Secret's, TLSReady is Ready and no more reloads happen. A server
// without TLS yet is reported False.
func TestReloadUntilServed(t *testing.T) {
	db := facettest.Database()
	f := newFixture(t, db, readyPod(db))
	f.prober.err = ErrNoTLS
	out := f.sync(t, db)
	assert.Equal(t, metav1.ConditionFalse, out.Condition.Status)
	assert.Equal(t, dbv1.ReasonTLSIssuing, out.Condition.Reason)

	srv := f.secret(t, resources.TLSSecretName(db))
	cert, err := pki.ParseCertificate(srv.Data["tls.crt"])
	require.NoError(t, err)
	ca := f.secret(t, resources.CASecretName(db))
	old, err := pki.IssueServer(pki.KeyPair{Cert: ca.Data["ca.crt"], Key: ca.Data["ca.key"]}, resources.ServerDNSNames(db), f.now, time.Hour)
	require.NoError(t, err)
	oldCert, _ := pki.ParseCertificate(old.Cert)
	f.prober.err, f.prober.cert = nil, oldCert

	out = f.sync(t, db)
	assert.Equal(t, metav1.ConditionTrue, out.Condition.Status)
	assert.Equal(t, dbv1.ReasonTLSReloading, out.Condition.Reason)
	assert.Equal(t, 1, f.reloader.reloads)
	assert.Equal(t, reloadRecheck, out.RequeueAfter)
	assert.Equal(t, pki.Serial(oldCert), *out.Status.TLS.ServedSerialNumber)
	assert.Contains(t, out.Condition.Message, cert.SerialNumber.Text(16))

	f.prober.cert = cert
	out = f.sync(t, db)
	assert.Equal(t, dbv1.ReasonTLSReady, out.Condition.Reason, out.Condition.Message)
	assert.Equal(t, 1, f.reloader.reloads, "no reload once served")
	assert.Equal(t, pki.Serial(cert), *out.Status.TLS.ServedSerialNumber)
	assert.Contains(t, out.Condition.Message, "serves certificate "+pki.Serial(cert))
}

// TestWithoutTLS: a Database whose StatefulSet predates TLS keeps
// plaintext and is told how to turn it on; spec.tls.mode Disabled is
// reported as such. Both get the CA and a certificate all the same, for
// the agents' endpoint (before, none: the agents' token travelled in
// clear), renewed in time; no server is asked to reload it.
func TestWithoutTLS(t *testing.T) {
	ctx := context.Background()
	legacy := facettest.Database()
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: legacy.Name}}
	f := newFixture(t, legacy, sts)
	out := f.sync(t, legacy)
	assert.Equal(t, metav1.ConditionTrue, out.Condition.Status)
	assert.Equal(t, dbv1.ReasonPlaintextKept, out.Condition.Reason)
	assert.Contains(t, out.Condition.Message, "spec.tls.mode: Required")
	assert.Contains(t, out.Condition.Message, "the instances' agents serve certificate")
	require.NoError(t, f.c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: resources.CASecretName(legacy)}, &corev1.Secret{}))

	disabled := facettest.Database()
	disabled.Spec.TLS = &dbv1.TLSSpec{Mode: dbv1.TLSModeDisabled}
	f = newFixture(t, disabled)
	out = f.sync(t, disabled)
	assert.Equal(t, dbv1.ReasonTLSDisabled, out.Condition.Reason)
	sec := &corev1.Secret{}
	require.NoError(t, f.c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: resources.TLSSecretName(disabled)}, sec))
	ca := &corev1.Secret{}
	require.NoError(t, f.c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: resources.CASecretName(disabled)}, ca))
	cert, err := pki.CheckServer(pki.KeyPair{Cert: sec.Data[corev1.TLSCertKey], Key: sec.Data[corev1.TLSPrivateKeyKey]},
		ca.Data[resources.CACertKey], resources.ServerDNSNames(disabled), f.now)
	require.NoError(t, err, "a certificate of the Database's CA for the pods' names")
	assert.Contains(t, out.Condition.Message, pki.Serial(cert))
	require.NotNil(t, out.Status.TLS)
	assert.Equal(t, pki.Serial(cert), *out.Status.TLS.SerialNumber)
	assert.Equal(t, pki.RenewalTime(cert).Sub(f.now), out.RequeueAfter, "looked at again at its renewal")
	assert.Zero(t, f.reloader.reloads, "no server to reload")

	f.now = pki.RenewalTime(cert).Add(time.Minute)
	f.sync(t, disabled)
	renewed := &corev1.Secret{}
	require.NoError(t, f.c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: resources.TLSSecretName(disabled)}, renewed))
	assert.NotEqual(t, sec.Data[corev1.TLSCertKey], renewed.Data[corev1.TLSCertKey], "renewed at its renewal time")
}

// TestBrokenSecretIsReissued: a certificate Secret somebody broke (a key
// of another certificate) is reissued; the Event names why, not the key.
func TestBrokenSecretIsReissued(t *testing.T) {
	db := facettest.Database()
	f := newFixture(t, db)
	f.sync(t, db)
	srv := f.secret(t, resources.TLSSecretName(db))
	before := pki.KeyPair{Cert: srv.Data["tls.crt"], Key: srv.Data["tls.key"]}
	srv.Data["tls.key"] = []byte("-----BEGIN PRIVATE KEY-----\nbroken\n-----END PRIVATE KEY-----\n")
	require.NoError(t, f.c.Update(context.Background(), srv))
	f.sync(t, db)
	after := f.secret(t, resources.TLSSecretName(db))
	assert.NotEqual(t, before.Cert, after.Data["tls.crt"])
	_, err := cryptotls.X509KeyPair(after.Data["tls.crt"], after.Data["tls.key"])
	assert.NoError(t, err)
	close(f.events.Events)
	var issued []string
	for e := range f.events.Events {
		assert.NotContains(t, e, "broken")
		if strings.Contains(e, ReasonCertificateIssued) {
			issued = append(issued, e)
		}
	}
	require.Len(t, issued, 2)
	assert.Contains(t, issued[1], "tls.key")
}

// TestConvergedReadsNoSecret: once verified, and after a restart (a new
// syncer) from status.tls and the Secrets' annotations, a converged
// Database's sync reads no Secret from the API server.
func TestConvergedReadsNoSecret(t *testing.T) {
	db := facettest.Database()
	f := newFixture(t, db)
	out := f.sync(t, db)
	f.sync(t, db) // reads and verifies the Secret once
	reads := 0
	counting := interceptor.NewClient(f.c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.Secret); ok {
				reads++
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	f.s.reader = counting
	f.sync(t, db)
	assert.Zero(t, reads, "a converged Database read a Secret")

	restarted := &syncer{client: f.s.client, reader: counting, writer: f.s.writer, lifetime: f.s.lifetime, now: f.s.now,
		prober: f.s.prober, reloader: f.s.reloader}
	st := out.Status.TLS
	db.Status.TLS = &dbv1.TLSStatus{SecretName: *st.SecretName, SerialNumber: *st.SerialNumber, NotAfter: st.NotAfter, RenewalTime: st.RenewalTime}
	again, err := restarted.Sync(context.Background(), db)
	require.NoError(t, err)
	assert.Zero(t, reads, "a restarted manager read a converged Database's Secret")
	assert.Equal(t, *st.SerialNumber, *again.Status.TLS.SerialNumber)
	assert.Equal(t, dbv1.ReasonTLSReady, again.Condition.Reason)
}
