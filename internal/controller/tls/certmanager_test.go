package tls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

func issuerDatabase() *dbv1.Database {
	db := facettest.Database()
	db.Spec.TLS = &dbv1.TLSSpec{IssuerRef: &dbv1.IssuerReference{Name: "team-ca", Kind: "ClusterIssuer", Group: "cert-manager.io"}}
	return db
}

// TestCertManagerNotInstalled: without the Certificate kind, TLSReady is
// False with a message saying so, and the look is repeated calmly.
func TestCertManagerNotInstalled(t *testing.T) {
	db := issuerDatabase()
	f := newFixture(t, db)
	// The API server's answer for a kind it does not serve.
	c := interceptor.NewClient(f.c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if u, ok := obj.(*unstructured.Unstructured); ok && u.GroupVersionKind() == resources.CertificateGVK {
				return &meta.NoKindMatchError{GroupKind: resources.CertificateGVK.GroupKind(), SearchedVersions: []string{"v1"}}
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	f.s.reader = c
	out := f.sync(t, db)
	assert.Equal(t, metav1.ConditionFalse, out.Condition.Status)
	assert.Equal(t, dbv1.ReasonIssuerNotInstalled, out.Condition.Reason)
	assert.Contains(t, out.Condition.Message, "not installed")
	assert.Equal(t, certManagerRecheck, out.RequeueAfter)
	assert.Error(t, f.c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: resources.TLSSecretName(db)}, &corev1.Secret{}),
		"dbkeeper issues no server certificate itself for an issuerRef")
}

// certManagerFixture is a fixture whose client serves cert-manager's
// Certificate kind, holding db.
func certManagerFixture(t *testing.T, db *dbv1.Database) (*fixture, client.WithWatch) {
	scheme := facettest.Scheme(t)
	scheme.AddKnownTypeWithName(resources.CertificateGVK, &unstructured.Unstructured{})
	scheme.AddKnownTypeWithName(resources.CertificateGVK.GroupVersion().WithKind("CertificateList"), &unstructured.UnstructuredList{})
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&dbv1.Database{}).WithObjects(db).Build()
	f := newFixture(t)
	f.c = c
	f.s.client, f.s.reader, f.s.writer = c, c, facet.WriterFor(c, f.events, Name)
	return f, c
}

// TestCertManagerIssues: the Certificate is applied with the Database's
// names, Secret and labels; until cert-manager fills the Secret TLSReady
// waits for it; a filled Secret (the test plays cert-manager) is checked
// and served.
func TestCertManagerIssues(t *testing.T) {
	db := issuerDatabase()
	f, c := certManagerFixture(t, db)

	out := f.sync(t, db)
	assert.Equal(t, dbv1.ReasonTLSIssuing, out.Condition.Reason, out.Condition.Message)
	assert.Contains(t, out.Condition.Message, "waiting for cert-manager")
	cert := &unstructured.Unstructured{}
	cert.SetGroupVersionKind(resources.CertificateGVK)
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: db.Name}, cert))
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	assert.Equal(t, resources.TLSSecretName(db), secretName)
	issuer, _, _ := unstructured.NestedStringMap(cert.Object, "spec", "issuerRef")
	assert.Equal(t, map[string]string{"name": "team-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}, issuer)
	names, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	assert.Equal(t, resources.ServerDNSNames(db), names)
	labels, _, _ := unstructured.NestedStringMap(cert.Object, "spec", "secretTemplate", "labels")
	assert.Equal(t, resources.ComponentTLS, labels[resources.LabelComponent])

	// cert-manager fills the Secret, first without ca.crt (an ACME issuer).
	ca, err := pki.NewCA("team CA", f.now)
	require.NoError(t, err)
	pair, err := pki.IssueServer(ca, resources.ServerDNSNames(db), f.now, time.Hour)
	require.NoError(t, err)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: resources.TLSSecretName(db), Labels: resources.Labels(db, resources.ComponentTLS)},
		Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": pair.Cert, "tls.key": pair.Key}}
	require.NoError(t, c.Create(context.Background(), sec))
	out = f.sync(t, db)
	assert.Equal(t, dbv1.ReasonCertificateInvalid, out.Condition.Reason)
	assert.Contains(t, out.Condition.Message, "ca.crt")

	sec.Data["ca.crt"] = ca.Cert
	require.NoError(t, c.Update(context.Background(), sec))
	out = f.sync(t, db)
	assert.Equal(t, metav1.ConditionTrue, out.Condition.Status, out.Condition.Message)
	served, _ := pki.ParseCertificate(pair.Cert)
	assert.Equal(t, pki.Serial(served), *out.Status.TLS.SerialNumber)
}

// TestCertManagerKeepsClientCertificatesTheDatabases: with a cert-manager
// issuer the instances still get a client certificate for the replication
// role from the Database's own CA (before: none, and the superuser and
// the replication role logged in with passwords over TCP, since the
// issuer may sign for others too); a second sync reissues nothing and
// reads no Secret, its renewal time reissues it from the same CA.
func TestCertManagerKeepsClientCertificatesTheDatabases(t *testing.T) {
	db := issuerDatabase()
	f, c := certManagerFixture(t, db)

	out := f.sync(t, db)
	assert.Equal(t, dbv1.ReasonTLSIssuing, out.Condition.Reason, "cert-manager has not filled its Secret yet")
	ca := f.secret(t, resources.CASecretName(db))
	sec := f.secret(t, resources.ReplicationClientSecretName(db))
	cert, err := pki.ParseCertificate(sec.Data[corev1.TLSCertKey])
	require.NoError(t, err)
	assert.Equal(t, agentapi.ReplicationUser, cert.Subject.CommonName)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.Data[resources.CACertKey])
	_, err = cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: f.now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err, "a client certificate of the Database's CA")
	_, err = tls.X509KeyPair(sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey])
	require.NoError(t, err)
	assert.True(t, resources.Belongs(db, sec))
	assert.LessOrEqual(t, out.RequeueAfter, pki.RenewalTime(cert).Sub(f.now))

	reads := 0
	f.s.reader = interceptor.NewClient(c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.Secret); ok && key.Name != resources.TLSSecretName(db) {
				reads++
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	f.sync(t, db)
	assert.Equal(t, sec.Data, f.secret(t, resources.ReplicationClientSecretName(db)).Data, "reissued without a reason")
	assert.Zero(t, reads, "a converged Database read the CA or the client certificate")

	f.now = pki.RenewalTime(cert).Add(time.Second)
	f.sync(t, db)
	renewed, err := pki.ParseCertificate(f.secret(t, resources.ReplicationClientSecretName(db)).Data[corev1.TLSCertKey])
	require.NoError(t, err)
	assert.NotEqual(t, pki.Serial(cert), pki.Serial(renewed), "renewed at its renewal time")
	_, err = renewed.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: f.now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err, "by the same CA")
}
