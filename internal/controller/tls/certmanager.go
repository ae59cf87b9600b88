package tls

import (
	"context"

	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// syncCertManager keeps the cert-manager Certificate of spec.tls.issuerRef.
func (s *syncer) syncCertManager(_ context.Context, _ *dbv1.Database) (facet.Outcome, error) {
	return facet.Outcome{Condition: conditions.False(dbv1.ConditionTLSReady, dbv1.ReasonIssuerNotInstalled,
		"spec.tls.issuerRef: cert-manager issuance is not built yet; remove spec.tls.issuerRef to have dbkeeper issue the certificate")}, nil
}
