package integration

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestCertManagerCertificate runs the tls controller against cert-manager's
// own Certificate CRD (testdata, v1.21.2, unchanged): the Certificate
// dbkeeper applies for spec.tls.issuerRef passes cert-manager's schema and
// says what cert-manager needs (issuer, Secret, names, the labels that put
// the Secret in dbkeeper's cache); the test then does what cert-manager
// does (fills the kubernetes.io/tls Secret with tls.crt, tls.key and
// ca.crt), and the Database's TLS is ready with that certificate and its
// clients get that CA. cert-manager itself is not run (it is not built
// here): the contract is its CRD and the Secret it writes.
func TestCertManagerCertificate(t *testing.T) {
	_, err := ctrlenvtest.InstallCRDs(cfg, ctrlenvtest.CRDInstallOptions{
		Paths: []string{filepath.Join("testdata", "cert-manager.io_certificates.yaml")},
	})
	require.NoError(t, err)
	ns := newNamespace(t)
	startOperator(t, ns, "*")
	db := createDatabase(t, newDatabase(ns, "issued", func(d *dbv1.Database) {
		d.Spec.TLS = &dbv1.TLSSpec{IssuerRef: &dbv1.IssuerReference{Name: "team-ca", Kind: "ClusterIssuer", Group: "cert-manager.io"}}
	}))
	ctx := context.Background()

	// The Certificate, as cert-manager's API server schema accepted it.
	cert := &unstructured.Unstructured{}
	cert.SetGroupVersionKind(resources.CertificateGVK)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.CertificateName(db)}, cert))
	}, timeout, tick)
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	assert.Equal(t, resources.TLSSecretName(db), secretName)
	issuer, _, _ := unstructured.NestedStringMap(cert.Object, "spec", "issuerRef")
	assert.Equal(t, map[string]string{"name": "team-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}, issuer)
	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	assert.Contains(t, dnsNames, resources.ClientServiceHost(db), "clients verify the client Service's name")
	labels, _, _ := unstructured.NestedStringMap(cert.Object, "spec", "secretTemplate", "labels")
	for k, v := range resources.Labels(db, resources.ComponentTLS) {
		assert.Equal(t, v, labels[k], "secretTemplate label %s: the operator's cache selects the Secret by it", k)
	}
	waitCondition(t, db, dbv1.ConditionTLSReady, metav1.ConditionFalse, dbv1.ReasonTLSIssuing)

	// What cert-manager's CA issuer writes.
	now := time.Now()
	ca, err := pki.NewCA("team-ca", now)
	require.NoError(t, err)
	server, err := pki.IssueServer(ca, dnsNames, now, time.Hour)
	require.NoError(t, err)
	require.NoError(t, admin.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: ns, Labels: labels},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: server.Cert, corev1.TLSPrivateKeyKey: server.Key, resources.CACertKey: ca.Cert},
	}))

	waitCondition(t, db, dbv1.ConditionTLSReady, metav1.ConditionTrue, dbv1.ReasonTLSReady)
	parsed, err := pki.ParseCertificate(server.Cert)
	require.NoError(t, err)
	got := getDatabase(t, db)
	require.NotNil(t, got.Status.TLS)
	assert.Equal(t, pki.Serial(parsed), got.Status.TLS.SerialNumber, "status names cert-manager's certificate")

	// Clients verify with cert-manager's CA: the generated Secret carries it.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		creds := &corev1.Secret{}
		require.NoError(c, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.GeneratedSecretName(db)}, creds))
		assert.Equal(c, string(ca.Cert), string(creds.Data[resources.CACertKey]))
		assert.Contains(c, string(creds.Data[resources.URIKey]), "sslmode=verify-full")
	}, timeout, tick)
}
