package tls

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// certManagerRecheck is how often the controller looks again while
// cert-manager is missing or has not filled the Secret: the Certificate is
// not watched (its kind may not exist), the Secret is.
const certManagerRecheck = 30 * time.Second

// syncCertManager keeps the cert-manager Certificate of
// spec.tls.issuerRef and reports from the Secret cert-manager fills (and
// the Certificate's Ready condition while it has not): the server then
// serves, and is reloaded to, cert-manager's certificate as it is for
// dbkeeper's own. Client certificates stay the Database's own CA's
// (ensureReplicationClient): an issuer that signs for others cannot sign
// a login of the superuser or the replication role.
func (s *syncer) syncCertManager(ctx context.Context, db *dbv1.Database, eng engine.Engine) (facet.Outcome, error) {
	clientRenewal, err := s.ensureReplicationClient(ctx, db)
	if err != nil {
		return facet.Outcome{}, err
	}
	out, err := s.syncCertificate(ctx, db, eng)
	if err == nil && (out.RequeueAfter == 0 || clientRenewal < out.RequeueAfter) {
		out.RequeueAfter = clientRenewal
	}
	return out, err
}

// ensureReplicationClient keeps the instances' client certificate for the
// replication role (resources.ReplicationClientSecret), signed by the
// Database's CA, which it makes when there is none: issued when missing,
// when the CA changed or at its renewal time, and returns how long until
// that renewal. A converged Database reads no Secret (the annotations in
// the metadata cache say enough).
func (s *syncer) ensureReplicationClient(ctx context.Context, db *dbv1.Database) (time.Duration, error) {
	now := s.now()
	name := resources.ReplicationClientSecretName(db)
	caMeta, err := s.metadata(ctx, db, resources.CASecretName(db))
	if err != nil {
		return 0, err
	}
	liveMeta, err := s.metadata(ctx, db, name)
	if err != nil {
		return 0, err
	}
	why := "there is none"
	if liveMeta != nil {
		renewal, perr := time.Parse(time.RFC3339, liveMeta.Annotations[resources.AnnotationRenewal])
		sum := liveMeta.Annotations[resources.AnnotationCASHA256]
		switch {
		case caMeta == nil || sum == "" || sum != caMeta.Annotations[resources.AnnotationCASHA256]:
			why = "it is not the CA's"
		case perr != nil || !now.Before(renewal):
			why = "its renewal time has come"
		default:
			return renewal.Sub(now), nil
		}
	}
	ca, bundle, err := s.ensureCA(ctx, db)
	if err != nil {
		return 0, err
	}
	pair, err := pki.IssueClient(ca, agentapi.ReplicationUser, now, s.certLifetime())
	if err != nil {
		return 0, fmt.Errorf("issuing the replication client certificate: %w", err)
	}
	cert, err := pki.ParseCertificate(pair.Cert)
	if err != nil {
		return 0, fmt.Errorf("reading the certificate just issued: %w", err)
	}
	live, err := apply.Live(ctx, s.reader, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.Secret{})
	if err != nil {
		return 0, fmt.Errorf("getting Secret %s: %w", name, err)
	}
	renewal := pki.RenewalTime(cert)
	// the Writer refuses a live Secret that is not the Database's
	if _, err := s.writer.Apply(ctx, live, resources.ReplicationClientSecret(db, pair.Cert, pair.Key, bundle, renewal)); err != nil {
		return 0, fmt.Errorf("applying Secret %s: %w", name, err)
	}
	log.FromContext(ctx).Info("Issuing the replication client certificate", "Secret", klog.KRef(db.Namespace, name),
		"serial", pki.Serial(cert), "why", why)
	s.writer.Eventf(db, nil, corev1.EventTypeNormal, ReasonCertificateIssued, "IssueCertificate",
		"Issued the instances' replication client certificate %s into Secret %s (%s)", pki.Serial(cert), name, why)
	return untilRenewal(renewal, now), nil
}

// syncCertificate is syncCertManager's part that keeps the Certificate
// and follows the Secret cert-manager fills.
func (s *syncer) syncCertificate(ctx context.Context, db *dbv1.Database, eng engine.Engine) (facet.Outcome, error) {
	t := dbv1.ConditionTLSReady
	desired := resources.Certificate(db)
	name := resources.CertificateName(db)
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(resources.CertificateGVK)
	err := s.reader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, live)
	switch {
	case meta.IsNoMatchError(err):
		return notInstalled(), nil
	case apierrors.IsNotFound(err):
		live = nil
	case err != nil:
		return facet.Outcome{}, fmt.Errorf("getting Certificate %s: %w", name, err)
	}
	var liveObj client.Object
	if live != nil {
		liveObj = live
	}
	if _, err := s.writer.Apply(ctx, liveObj, client.ApplyConfigurationFromUnstructured(desired)); err != nil {
		if meta.IsNoMatchError(err) {
			return notInstalled(), nil
		}
		return facet.Outcome{}, fmt.Errorf("applying Certificate %s: %w", name, err)
	}

	secret := resources.TLSSecretName(db)
	sec, err := apply.Live(ctx, s.reader, client.ObjectKey{Namespace: db.Namespace, Name: secret}, &corev1.Secret{})
	if err != nil {
		return facet.Outcome{}, fmt.Errorf("getting Secret %s: %w", secret, err)
	}
	if sec == nil {
		return facet.Outcome{RequeueAfter: certManagerRecheck, Condition: conditions.False(t, dbv1.ReasonTLSIssuing, fmt.Sprintf(
			"waiting for cert-manager to issue Certificate %s (spec.tls.issuerRef %s %s) into Secret %s%s",
			name, db.Spec.TLS.IssuerRef.Kind, db.Spec.TLS.IssuerRef.Name, secret, certificateReady(live)))}, nil
	}
	pair := pki.KeyPair{Cert: sec.Data[corev1.TLSCertKey], Key: sec.Data[corev1.TLSPrivateKeyKey]}
	ca := sec.Data[resources.CACertKey]
	cert, err := pki.CheckServer(pair, ca, resources.ServerDNSNames(db), s.now())
	if err != nil {
		return facet.Outcome{RequeueAfter: certManagerRecheck, Condition: conditions.False(t, dbv1.ReasonCertificateInvalid, fmt.Sprintf(
			"Secret %s from cert-manager cannot be used: %s (the issuer must provide ca.crt, which clients verify the server with)%s",
			secret, conditions.Quote(err.Error(), 200), certificateReady(live)))}, nil
	}
	return s.observeServer(ctx, db, eng, infoOf(cert, ca))
}

func notInstalled() facet.Outcome {
	return facet.Outcome{RequeueAfter: certManagerRecheck, Condition: conditions.False(dbv1.ConditionTLSReady, dbv1.ReasonIssuerNotInstalled,
		"spec.tls.issuerRef names a cert-manager issuer, but cert-manager's Certificate kind (cert-manager.io/v1) is not installed: "+
			"install cert-manager, or remove spec.tls.issuerRef to have dbkeeper issue the certificate")}
}

// certificateReady is "; Certificate Ready: <status> <reason>: <message>"
// from the live Certificate's Ready condition, or "" when it has none.
func certificateReady(cert *unstructured.Unstructured) string {
	if cert == nil {
		return ""
	}
	conds, _, _ := unstructured.NestedSlice(cert.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != "Ready" {
			continue
		}
		return fmt.Sprintf("; Certificate Ready is %v (%v): %s", m["status"], m["reason"], conditions.Quote(fmt.Sprint(m["message"]), 200))
	}
	return ""
}
