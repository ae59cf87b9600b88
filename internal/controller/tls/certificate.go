package tls

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// certInfo is what the controller knows of the Secret's certificate:
// everything when it read or issued it, only what status.tls and the
// Secret's annotations say after a restart (raw and ca nil; they are read
// when needed).
type certInfo struct {
	serial            string
	notAfter, renewal time.Time
	raw, ca           []byte
}

func infoOf(cert *x509.Certificate, ca []byte) certInfo {
	return certInfo{serial: pki.Serial(cert), notAfter: cert.NotAfter, renewal: pki.RenewalTime(cert), raw: cert.Raw, ca: ca}
}

// ensureCertificate makes the CA once and issues the server certificate
// when there is none, when it is not the CA's or not for the Database's
// names, or when its renewal time has come; it returns what the caller needs
// of the certificate (certInfo). A certificate Secret verified before, whose
// resourceVersion and its CA Secret's (in the metadata cache) have not
// changed since, is not read again: a converged Database costs no Secret
// read, and a restarted manager reads each certificate Secret once. ca,
// when set, is the CA Secret as this reconcile just wrote it (a step of a
// rotation), which the cache may not have yet.
func (s *syncer) ensureCertificate(ctx context.Context, db *dbv1.Database, ca *corev1.Secret) (certInfo, error) {
	now := s.now()
	name := resources.TLSSecretName(db)
	var caMeta *metav1.PartialObjectMetadata
	if ca != nil {
		caMeta = &metav1.PartialObjectMetadata{ObjectMeta: ca.ObjectMeta}
	} else if m, err := s.metadata(ctx, db, resources.CASecretName(db)); err != nil {
		return certInfo{}, err
	} else {
		caMeta = m
	}
	tlsMeta, err := s.metadata(ctx, db, name)
	if err != nil {
		return certInfo{}, err
	}
	version := ""
	if caMeta != nil && tlsMeta != nil {
		version = caMeta.ResourceVersion + "/" + tlsMeta.ResourceVersion
		if info, ok := s.knownCertificate(db, caMeta, tlsMeta, version, now); ok {
			return info, nil
		}
	}
	why := "there is none"
	if tlsMeta != nil {
		info, usable, reason, err := s.checkCertificate(ctx, db, caMeta, version, now)
		if err != nil {
			return certInfo{}, err
		}
		if usable {
			return info, nil
		}
		why = reason
	}
	return s.issueCertificate(ctx, db, why, now)
}

// knownCertificate is ensureCertificate's certificate when the metadata
// cache says enough, without reading a Secret: the one verified last at
// version (the CA and certificate Secrets' resourceVersions), or, in a
// restarted manager, the one status.tls and the Secrets' annotations
// name; false when neither applies or its renewal time has come.
func (s *syncer) knownCertificate(db *dbv1.Database, caMeta, tlsMeta *metav1.PartialObjectMetadata, version string, now time.Time) (certInfo, bool) {
	if v, ok := s.verified.Load(client.ObjectKeyFromObject(db)); ok {
		if v := v.(verified); v.version == version && now.Before(pki.RenewalTime(v.cert)) {
			return infoOf(v.cert, v.ca), true
		}
	}
	// A restarted manager: status.tls and the Secrets' annotations
	// say which certificate dbkeeper put there; it is read when the
	// server serves another one, and at renewal.
	if st := db.Status.TLS; st != nil && st.SerialNumber != "" && st.NotAfter != nil && st.RenewalTime != nil &&
		tlsMeta.Annotations[resources.AnnotationSerial] == st.SerialNumber &&
		tlsMeta.Annotations[resources.AnnotationClientAuth] == "true" &&
		caMeta.Annotations[resources.AnnotationCASHA256] != "" &&
		tlsMeta.Annotations[resources.AnnotationCASHA256] == caMeta.Annotations[resources.AnnotationCASHA256] &&
		now.Before(st.RenewalTime.Time) {
		return certInfo{serial: st.SerialNumber, notAfter: st.NotAfter.Time, renewal: st.RenewalTime.Time}, true
	}
	return certInfo{}, false
}

// checkCertificate reads the certificate Secret from the API server and
// reports whether its certificate is usable (for the Database's names,
// the CA's, able to authenticate a client, before its renewal time), and
// if not, why it is issued again. A usable one read at version (the CA
// and certificate Secrets' resourceVersions, "" when the cache lacks
// either) is remembered as verified.
func (s *syncer) checkCertificate(ctx context.Context, db *dbv1.Database, caMeta *metav1.PartialObjectMetadata, version string, now time.Time) (certInfo, bool, string, error) {
	name := resources.TLSSecretName(db)
	live, err := apply.Live(ctx, s.reader, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.Secret{})
	if err != nil {
		return certInfo{}, false, "", fmt.Errorf("getting Secret %s: %w", name, err)
	}
	if live == nil {
		return certInfo{}, false, "there is none", nil
	}
	pair := pki.KeyPair{Cert: live.Data[corev1.TLSCertKey], Key: live.Data[corev1.TLSPrivateKeyKey]}
	ca := live.Data[resources.CACertKey]
	cert, err := pki.CheckServer(pair, ca, resources.ServerDNSNames(db), now)
	sameCA, caErr := s.isCA(ctx, db, caMeta, ca)
	switch {
	case caErr != nil:
		return certInfo{}, false, "", caErr
	case err != nil:
		return certInfo{}, false, err.Error(), nil
	case !sameCA:
		return certInfo{}, false, "its ca.crt is not the CA's", nil
	case !pki.ClientAuthUsable(cert):
		// issued before the instances authenticated to each other
		// with it (replication, backups from standbys)
		return certInfo{}, false, "it cannot authenticate a client", nil
	case !now.Before(pki.RenewalTime(cert)):
		return certInfo{}, false, "its renewal time has come", nil
	}
	if version != "" && version == caMeta.ResourceVersion+"/"+live.ResourceVersion {
		s.verified.Store(client.ObjectKeyFromObject(db), verified{version: version, cert: cert, ca: ca})
	}
	return infoOf(cert, ca), true, "", nil
}

// issueCertificate issues the server certificate from the CA (made by
// ensureCA when there is none) into the certificate Secret, why saying
// what was wrong with the one there, and records an Event.
func (s *syncer) issueCertificate(ctx context.Context, db *dbv1.Database, why string, now time.Time) (certInfo, error) {
	name := resources.TLSSecretName(db)
	ca, bundle, err := s.ensureCA(ctx, db)
	if err != nil {
		return certInfo{}, err
	}
	pair, err := pki.IssueServer(ca, resources.ServerDNSNames(db), now, s.certLifetime())
	if err != nil {
		return certInfo{}, fmt.Errorf("issuing the server certificate: %w", err)
	}
	cert, err := pki.ParseCertificate(pair.Cert)
	if err != nil {
		return certInfo{}, fmt.Errorf("reading the certificate just issued: %w", err)
	}
	log.FromContext(ctx).Info("Issuing server certificate", "Secret", klog.KRef(db.Namespace, name),
		"serial", pki.Serial(cert), "notAfter", cert.NotAfter.UTC().Format(time.RFC3339), "why", why)
	// Applied without a live object, so it is always sent: the new key
	// must reach the Secret.
	if _, err := s.writer.Apply(ctx, nil, resources.TLSSecret(db, pair.Cert, pair.Key, bundle, pki.Serial(cert))); err != nil {
		return certInfo{}, fmt.Errorf("applying Secret %s: %w", name, err)
	}
	s.writer.Eventf(db, nil, corev1.EventTypeNormal, ReasonCertificateIssued, "IssueCertificate",
		"Issued server certificate %s into Secret %s (%s)", pki.Serial(cert), name, why)
	return infoOf(cert, bundle), nil
}

// isCA reports whether caPEM is what the Database's CA Secret says to
// trust (resources.CABundle): by the CA Secret's AnnotationCASHA256 in the
// cache, or, when the cache does not have it (yet), by reading the CA
// Secret.
func (s *syncer) isCA(ctx context.Context, db *dbv1.Database, caMeta *metav1.PartialObjectMetadata, caPEM []byte) (bool, error) {
	if caMeta != nil && caMeta.Annotations[resources.AnnotationCASHA256] != "" {
		return caMeta.Annotations[resources.AnnotationCASHA256] == resources.CASHA256(caPEM), nil
	}
	name := resources.CASecretName(db)
	live, err := apply.Live(ctx, s.reader, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.Secret{})
	if err != nil {
		return false, fmt.Errorf("getting Secret %s: %w", name, err)
	}
	return live != nil && bytes.Equal(resources.CABundle(live), caPEM), nil
}

// verified is a certificate Secret as last verified: the resourceVersions
// of the CA and certificate Secrets, and the public certificates (never a
// key).
type verified struct {
	version string
	cert    *x509.Certificate
	ca      []byte
}

func (s *syncer) certLifetime() time.Duration {
	if s.lifetime > 0 {
		return s.lifetime
	}
	return pki.DefaultLifetime
}
