package tls

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// signedBy reports whether the certificate Secret's tls.crt verifies with
// caPEM alone.
func signedBy(t *testing.T, srv *corev1.Secret, caPEM []byte, now time.Time) bool {
	t.Helper()
	cert, err := pki.ParseCertificate(srv.Data[corev1.TLSCertKey])
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	_, err = cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now})
	return err == nil
}

// TestCARotation: a rotate-ca token rotates the Database's CA in two
// overlaps: first ca.crt (of the certificate Secret, which the clients and
// the servers trust) holds the old and the new CA while the server's
// certificate and the clients' still come from the old one; an overlap
// later they come from the new CA, the old one still trusted; an overlap
// later ca.crt holds the new CA only. Each step re-issues the server
// certificate, status.tls.caRotation and an Event say where it is, and the
// same token again changes nothing. A CA made while a token is on the
// Database is not rotated for it.
func TestCARotation(t *testing.T) {
	db := facettest.Database()
	overlap := 10 * time.Minute
	db.Spec.TLS = &dbv1.TLSSpec{CARotationOverlap: &metav1.Duration{Duration: overlap}}
	f := newFixture(t, db)
	f.sync(t, db)
	oldCA := f.secret(t, resources.CASecretName(db)).Data[resources.CACertKey]

	db.Annotations = map[string]string{dbv1.AnnotationRotateCA: "t1"}
	out := f.sync(t, db)
	ca := f.secret(t, resources.CASecretName(db))
	newCA := ca.Data[resources.CANextCertKey]
	require.NotEmpty(t, newCA, "no next CA")
	assert.Equal(t, oldCA, ca.Data[resources.CACertKey], "the old CA still signs")
	srv := f.secret(t, resources.TLSSecretName(db))
	assert.Equal(t, string(oldCA)+string(newCA), string(srv.Data[resources.CACertKey]), "ca.crt holds both")
	assert.True(t, signedBy(t, srv, oldCA, f.now), "the server's certificate is the old CA's")
	rot := out.Status.TLS.CARotation
	require.NotNil(t, rot)
	assert.Equal(t, dbv1.CARotationTrusting, *rot.Phase)
	assert.Equal(t, "t1", *rot.Token)
	assert.Equal(t, f.now.Add(overlap), rot.NextPhaseAt.Time)
	assert.LessOrEqual(t, out.RequeueAfter, overlap)

	f.now = f.now.Add(overlap - time.Second)
	f.sync(t, db)
	assert.Equal(t, dbv1.CARotationTrusting, caPhase(f.secret(t, resources.CASecretName(db))), "the overlap is not over")

	f.now = f.now.Add(time.Second)
	out = f.sync(t, db)
	ca = f.secret(t, resources.CASecretName(db))
	assert.Equal(t, newCA, ca.Data[resources.CACertKey], "the new CA signs")
	assert.Equal(t, oldCA, ca.Data[resources.CAPreviousCertKey])
	assert.NotContains(t, ca.Data, resources.CANextKeyKey)
	srv = f.secret(t, resources.TLSSecretName(db))
	assert.Equal(t, string(newCA)+string(oldCA), string(srv.Data[resources.CACertKey]), "ca.crt holds both")
	assert.True(t, signedBy(t, srv, newCA, f.now), "the server's certificate is the new CA's")
	assert.Equal(t, dbv1.CARotationServing, *out.Status.TLS.CARotation.Phase)

	f.now = f.now.Add(overlap)
	out = f.sync(t, db)
	ca = f.secret(t, resources.CASecretName(db))
	assert.NotContains(t, ca.Data, resources.CAPreviousCertKey)
	srv = f.secret(t, resources.TLSSecretName(db))
	assert.Equal(t, string(newCA), string(srv.Data[resources.CACertKey]), "ca.crt holds the new CA only")
	assert.True(t, signedBy(t, srv, newCA, f.now))
	assert.Equal(t, dbv1.CARotationDone, *out.Status.TLS.CARotation.Phase)
	assert.Nil(t, out.Status.TLS.CARotation.NextPhaseAt)

	f.now = f.now.Add(overlap)
	f.sync(t, db)
	assert.Equal(t, ca.Data, f.secret(t, resources.CASecretName(db)).Data, "the same token rotated again")

	close(f.events.Events)
	var steps []string
	for e := range f.events.Events {
		if strings.Contains(e, ReasonCARotation) {
			steps = append(steps, e)
		}
	}
	assert.Len(t, steps, 3, "an Event for each step: %v", steps)

	// a CA made with a token already on the Database needs no rotation
	fresh := facettest.Database()
	fresh.Annotations = map[string]string{dbv1.AnnotationRotateCA: "from-the-start"}
	g := newFixture(t, fresh)
	out = g.sync(t, fresh)
	out = g.sync(t, fresh)
	assert.Equal(t, dbv1.CARotationDone, caPhase(g.secret(t, resources.CASecretName(fresh))))
	assert.Nil(t, out.Status.TLS.CARotation)
}

// laggingCache is a metadata cache that has not seen the latest writes of
// some Secrets yet: it answers with their metadata as frozen.
type laggingCache struct {
	client.Reader
	frozen map[client.ObjectKey]*metav1.PartialObjectMetadata
}

func (c laggingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if m, ok := c.frozen[key]; ok {
		if p, ok := obj.(*metav1.PartialObjectMetadata); ok {
			m.DeepCopyInto(p)
			return nil
		}
	}
	return c.Reader.Get(ctx, key, obj, opts...)
}

// TestCARotationStepReissuesAtOnce: the reconcile that takes a step of a
// rotation also issues the server certificate with the new ca.crt, though
// the cache has not seen the CA Secret's update yet: the status it writes
// names the new phase, so the certificate Secret (what clients trust) must
// already be in line. Before, a reconcile that read the CA Secret's stale
// metadata kept the certificate it knew, and status said Done while ca.crt
// still held the old CA (CI's TestTLSRenewalAndCARotationWithoutFailedQuery).
func TestCARotationStepReissuesAtOnce(t *testing.T) {
	db := facettest.Database()
	overlap := 10 * time.Minute
	db.Spec.TLS = &dbv1.TLSSpec{CARotationOverlap: &metav1.Duration{Duration: overlap}}
	f := newFixture(t, db)
	f.sync(t, db)
	f.sync(t, db) // the certificate is verified: the next reconciles know it
	oldCA := f.secret(t, resources.CASecretName(db)).Data[resources.CACertKey]
	caKey := client.ObjectKey{Namespace: db.Namespace, Name: resources.CASecretName(db)}
	freeze := func() {
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		require.NoError(t, f.c.Get(context.Background(), caKey, m))
		f.s.cache = laggingCache{Reader: f.c, frozen: map[client.ObjectKey]*metav1.PartialObjectMetadata{caKey: m}}
	}

	freeze()
	db.Annotations = map[string]string{dbv1.AnnotationRotateCA: "t1"}
	out := f.sync(t, db)
	assert.Equal(t, dbv1.CARotationTrusting, *out.Status.TLS.CARotation.Phase)
	newCA := f.secret(t, resources.CASecretName(db)).Data[resources.CANextCertKey]
	assert.Equal(t, string(oldCA)+string(newCA), string(f.secret(t, resources.TLSSecretName(db)).Data[resources.CACertKey]),
		"ca.crt holds both once status says Trusting")

	for _, want := range []dbv1.CARotationPhase{dbv1.CARotationServing, dbv1.CARotationDone} {
		freeze()
		f.now = f.now.Add(overlap)
		out = f.sync(t, db)
		require.Equal(t, want, *out.Status.TLS.CARotation.Phase)
		assert.Equal(t, string(resources.CABundle(f.secret(t, resources.CASecretName(db)))), string(f.secret(t, resources.TLSSecretName(db)).Data[resources.CACertKey]),
			"ca.crt is the CA Secret's bundle once status says %s", want)
	}
	assert.Equal(t, string(newCA), string(f.secret(t, resources.TLSSecretName(db)).Data[resources.CACertKey]), "ca.crt holds the new CA only")
}
