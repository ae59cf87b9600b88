package integration

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/zapr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/logging"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
	"github.com/dbkeeper/dbkeeper/test/framework/operator"
	"github.com/dbkeeper/dbkeeper/test/framework/postgres"
)

// TestRolesFollowTheirSecrets: the roles controller, in the manager on a
// real API server, with a local PostgreSQL as the Database's primary,
// makes the roles and databases of the spec and writes status.roles; a
// passwordSecret changed (a user's Secret, unlabelled: seen through the
// metadata-only cache of every Secret) reaches the server within seconds,
// not at the 5-minute resync; the old password is refused.
func TestRolesFollowTheirSecrets(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	srv := postgres.Start(t)
	srv.SQL(t, "postgres", "CREATE ROLE app LOGIN")
	db := newDatabase(ns, "declared", func(d *dbv1.Database) {
		d.Spec.Roles = []dbv1.RoleSpec{{Name: "reporting", PasswordSecret: &dbv1.PasswordSecretRef{Name: "reporting-pw"}, InRoles: []string{"pg_read_all_data"}}}
		d.Spec.Databases = []dbv1.ServerDatabaseSpec{{Name: "analytics", Owner: "reporting"}}
	})
	// what the secret controller would have made, with the local
	// server's superuser
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: resources.SuperuserSecretName(db)},
			Data: map[string][]byte{engine.UsernameKey: []byte(postgres.Superuser), engine.PasswordKey: []byte(srv.Password)}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: resources.GeneratedSecretName(db)},
			Data: map[string][]byte{engine.UsernameKey: []byte("app"), engine.PasswordKey: []byte("app-password")}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reporting-pw", Annotations: map[string]string{dbv1.AnnotationCredentialsFor: db.Name}},
			Data: map[string][]byte{"password": []byte("first-reporting-pw")}},
	} {
		require.NoError(t, admin.Create(ctx, s))
	}
	createDatabase(t, db)
	operator.Start(t, operatorCfg, operator.Options{
		Controllers: "roles",
		Namespaces:  []string{ns},
		Logger:      logging.Capped(zapr.NewLogger(newCapturingLogger("operator"))),
		Instances:   srv.Connector(),
	})
	login := func(pw string) error {
		c, err := sqlconn.Connect(ctx, sqlconn.Target{Host: "127.0.0.1", Port: int32(srv.Port), User: "reporting", Password: pw, Database: "analytics"})
		if err == nil {
			_ = c.Close(ctx)
		}
		return err
	}

	cond := waitCondition(t, db, dbv1.ConditionRolesReady, metav1.ConditionTrue, dbv1.ReasonRolesReconciled)
	t.Logf("RolesReady: %s", cond.Message)
	require.NoError(t, login("first-reporting-pw"))
	assert.Equal(t, &dbv1.RolesStatus{Roles: []string{"reporting"}, Databases: []string{"analytics"}}, getDatabase(t, db).Status.Roles)

	sec := &corev1.Secret{}
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "reporting-pw"}, sec))
	sec.Data["password"] = []byte("second-reporting-pw")
	require.NoError(t, admin.Update(ctx, sec))
	changed := time.Now()
	require.Eventually(t, func() bool { return login("second-reporting-pw") == nil }, timeout, 100*time.Millisecond,
		"the changed Secret reaches the server without waiting for the resync")
	t.Logf("the new password works %v after the Secret changed", time.Since(changed).Round(time.Millisecond))
	assert.ErrorContains(t, login("first-reporting-pw"), "password authentication failed")
}
