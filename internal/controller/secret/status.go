package secret

import (
	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

func (s *syncer) CurrentStatus(db *dbv1.Database) *dbv1ac.DatabaseStatusApplyConfiguration {
	if db.Status.CredentialsSecret == "" && db.Status.Credentials == nil {
		return nil
	}
	st := dbv1ac.DatabaseStatus()
	if db.Status.CredentialsSecret != "" {
		st.WithCredentialsSecret(db.Status.CredentialsSecret)
	}
	if c := db.Status.Credentials; c != nil {
		ac := dbv1ac.CredentialsStatus()
		if c.Secret != "" {
			ac.WithSecret(c.Secret)
		}
		if c.SuperuserSecret != "" {
			ac.WithSuperuserSecret(c.SuperuserSecret)
		}
		if c.AppliedResourceVersion != "" {
			ac.WithAppliedResourceVersion(c.AppliedResourceVersion)
		}
		st.WithCredentials(ac)
	}
	return st
}

// appliedVersion is the resourceVersion of Secret name whose password the
// server had at the last check, from the Database's status.
func appliedVersion(db *dbv1.Database, name string) string {
	c := db.Status.Credentials
	if c == nil || c.Secret != name {
		return ""
	}
	return c.AppliedResourceVersion
}

// credentialsStatus is status.credentials (and the deprecated
// status.credentialsSecret) with applied as the applied version.
func credentialsStatus(db *dbv1.Database, applied string) *dbv1ac.DatabaseStatusApplyConfiguration {
	name := resources.CredentialsSecretName(db)
	c := dbv1ac.CredentialsStatus().WithSecret(name).WithSuperuserSecret(resources.SuperuserSecretName(db))
	if applied != "" {
		c.WithAppliedResourceVersion(applied)
	}
	return dbv1ac.DatabaseStatus().WithCredentialsSecret(name).WithCredentials(c)
}
