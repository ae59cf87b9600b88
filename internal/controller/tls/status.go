package tls

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// statusOf is status.tls of the Secret's certificate.
func statusOf(db *dbv1.Database, info certInfo) *dbv1ac.DatabaseStatusApplyConfiguration {
	return dbv1ac.DatabaseStatus().WithTLS(dbv1ac.TLSStatus().
		WithSecretName(resources.TLSSecretName(db)).
		WithNotAfter(metav1.NewTime(info.notAfter)).
		WithRenewalTime(metav1.NewTime(info.renewal)).
		WithSerialNumber(info.serial))
}

func (s *syncer) CurrentStatus(db *dbv1.Database) *dbv1ac.DatabaseStatusApplyConfiguration {
	st := db.Status.TLS
	if st == nil {
		return nil
	}
	ac := dbv1ac.TLSStatus().WithSecretName(st.SecretName).WithSerialNumber(st.SerialNumber).WithServedSerialNumber(st.ServedSerialNumber)
	if st.NotAfter != nil {
		ac.WithNotAfter(*st.NotAfter)
	}
	if st.RenewalTime != nil {
		ac.WithRenewalTime(*st.RenewalTime)
	}
	if r := st.CARotation; r != nil {
		ac.WithCARotation(caRotationApply(*r))
	}
	return dbv1ac.DatabaseStatus().WithTLS(ac)
}
