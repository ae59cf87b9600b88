package secret

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/internal/roles"
	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
)

// connect opens a session with instance 0 as the superuser. A server
// that refuses the superuser may be a Database made before dbkeeper
// separated the roles, whose application's role is the bootstrap
// superuser: connected as the application, connect creates the superuser
// role with the Secret's password (D6 step 1) and connects again. An error
// is trouble reaching the server (RotationPending); failed is a server that
// refuses both logins (RotationFailed).
func (s *syncer) connect(ctx context.Context, db *dbv1.Database, eng engine.Engine, super, app instance.Login, appName string) (instance.Conn, *metav1.Condition, error) {
	conn, err := s.instances.Connect(ctx, db, super, "")
	if err == nil || !sqlconn.AuthFailed(err) {
		return conn, nil, err
	}
	superName := resources.SuperuserSecretName(db)
	legacy, ok := eng.(engine.LegacyRoles)
	refused := func(why string) (instance.Conn, *metav1.Condition, error) {
		cond := conditions.False(dbv1.ConditionCredentialsReady, dbv1.ReasonRotationFailed, fmt.Sprintf(
			"the server refuses the superuser %s of Secret %s; %s", super.User, superName, why))
		return nil, &cond, nil
	}
	if !ok {
		return refused("set that password on the server by hand")
	}
	appConn, err := s.instances.Connect(ctx, db, app, "")
	if sqlconn.AuthFailed(err) {
		return refused(fmt.Sprintf("for a Database created before dbkeeper separated the roles, dbkeeper creates it connected as role %s, "+
			"but the server refuses the password of Secret %s too (was it changed before the upgrade?): put the previous password back in %s once, "+
			"or create the superuser with the password of Secret %s by hand", app.User, appName, appName, superName))
	}
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = appConn.Close(ctx) }()
	bootstrap, _, err := appConn.QueryValue(ctx, legacy.BootstrapSuperuser())
	if err != nil {
		return nil, nil, fmt.Errorf("finding the bootstrap superuser: %w", err)
	}
	if bootstrap == nil || *bootstrap != app.User {
		return refused("set that password on the server by hand (the application's role is not the server's superuser, so dbkeeper cannot)")
	}
	ensure, err := legacy.EnsureSuperuser(super.User)
	if err != nil {
		return refused(err.Error())
	}
	set, err := eng.SetPassword(super.User, super.Password)
	if err != nil {
		return refused(err.Error())
	}
	_, err = appConn.Exec(ctx, ensure)
	if err == nil {
		// the statement that carries the password, out of the server log
		err = roles.ExecUnlogged(ctx, appConn, eng, set)
	}
	if err != nil {
		if sqlconn.Unreachable(err) {
			return nil, nil, err
		}
		return refused(fmt.Sprintf("creating it as role %s failed: %v", app.User, err))
	}
	log.FromContext(ctx).Info("Created the superuser role of a Database made before dbkeeper separated the roles",
		"role", super.User, "Secret", klog.KRef(db.Namespace, superName))
	s.writer.Eventf(db, nil, corev1.EventTypeNormal, ReasonSuperuserCreated, "CreateSuperuser",
		"Created superuser role %s from Secret %s, connected as role %s (the server's superuser since before dbkeeper separated the roles)",
		super.User, superName, app.User)
	conn, err = s.instances.Connect(ctx, db, super, "")
	return conn, nil, err
}

// demote runs D6 step 2 in the application's database: the bootstrap
// superuser becomes role's legacy name and can no longer log in, and role
// becomes an ordinary owner with the same password.
func (s *syncer) demote(ctx context.Context, db *dbv1.Database, eng engine.Engine, super instance.Login, app roles.App) error {
	legacy, ok := eng.(engine.LegacyRoles)
	if !ok {
		return errors.New("the engine cannot demote its bootstrap superuser")
	}
	migrate, err := legacy.MigrateLegacyAppRole(app.Role, legacy.LegacyRoleName(app.Role))
	if err != nil {
		return err
	}
	log.FromContext(ctx).Info("Demoting the application's role from the bootstrap superuser", "role", app.Role, "database", app.Database)
	conn, err := s.instances.Connect(ctx, db, super, app.Database)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, migrate); err != nil {
		return fmt.Errorf("demoting role %s: %w", app.Role, err)
	}
	return nil
}
