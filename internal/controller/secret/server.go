package secret

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/internal/roles"
	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
)

// Resync is how often a Database whose server has its credentials is
// checked again without an event: it catches a password or a role changed
// by hand on the server.
const Resync = 10 * time.Minute

// Reasons of the Events of the server step; they name roles, databases and
// Secrets, never a password or a verifier.
const (
	ReasonPasswordSet      = "PasswordSet"
	ReasonRoleRepaired     = "RoleRepaired"
	ReasonDatabaseCreated  = "DatabaseCreated"
	ReasonSuperuserCreated = "SuperuserCreated"
	ReasonAppRoleDemoted   = "AppRoleDemoted"
	ReasonLegacySuperuser  = dbv1.ReasonLegacySuperuser
)

// serverStep brings the server of db in line with its application's
// Secret (docs/design/roles-and-rotation.md, D4), once the Secret itself is
// in order (settled: its True condition, Generated or Provided). It reads
// both Secrets' data from the API server, connects to instance 0 as the
// superuser and runs roles.Apply, and reports what it found in
// CredentialsReady and status.credentials.
func (s *syncer) serverStep(ctx context.Context, db *dbv1.Database, eng engine.Engine, settled metav1.Condition) (facet.Outcome, error) {
	t := dbv1.ConditionCredentialsReady
	appName := resources.CredentialsSecretName(db)
	key := client.ObjectKeyFromObject(db)
	app := &corev1.Secret{}
	if err := s.reader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: appName}, app); err != nil {
		return facet.Outcome{}, fmt.Errorf("getting Secret %s: %w", appName, err)
	}
	role := string(app.Data[engine.UsernameKey])
	password := string(app.Data[engine.PasswordKey])
	version := app.ResourceVersion
	previous := appliedVersion(db, appName)
	out := facet.Outcome{Status: credentialsStatus(db, previous)}

	// A password the server cannot take is refused before anything is
	// sent; the change of the Secret brings us back.
	if err := engine.CheckPassword(password); err != nil {
		s.pending.Reset(key)
		out.Condition = conditions.False(t, dbv1.ReasonRotationFailed, fmt.Sprintf(
			"Secret %s (resourceVersion %s), key %s: %v; the server keeps the previous password", appName, version, engine.PasswordKey, err))
		return out, nil
	}
	super, err := s.ensureSuperuser(ctx, db, eng, role)
	if err != nil || super.failed != nil {
		if super.failed != nil {
			out.Condition = *super.failed
		}
		return out, err
	}

	conn, failed, err := s.connect(ctx, db, eng, super.login, instance.Login{User: role, Password: password}, appName)
	if err != nil {
		return s.pendingOutcome(ctx, db, out, appName, version, err), nil
	}
	if failed != nil {
		s.pending.Reset(key)
		out.Condition = *failed
		out.RequeueAfter = Resync
		return out, nil
	}
	defer func() { _ = conn.Close(ctx) }()

	target := roles.App{Role: role, Database: engine.AppDatabase(app.Data), Password: password}
	res, demoted, nameErr, err := s.applyRoles(ctx, db, eng, conn, super.login, target)
	if err != nil {
		if sqlconn.Unreachable(err) {
			return s.pendingOutcome(ctx, db, out, appName, version, err), nil
		}
		s.pending.Reset(key)
		log.FromContext(ctx).Info("The server refused the credentials", "Secret", klog.KRef(db.Namespace, appName), "role", role, "error", err.Error())
		out.Condition = conditions.False(t, dbv1.ReasonRotationFailed, fmt.Sprintf(
			"Secret %s (resourceVersion %s): %v; nothing was changed", appName, version, err))
		out.RequeueAfter = Resync
		return out, nil
	}
	s.pending.Reset(key)
	s.report(ctx, db, app, role, target.Database, res, demoted)
	out.Status = credentialsStatus(db, version)
	out.RequeueAfter = Resync
	out.Condition = s.appliedCondition(db, settled, appName, version, previous, target, res, nameErr)
	return out, nil
}

// applyRoles runs roles.Apply for target in the session conn and, for a
// role that is still the bootstrap superuser (res.Legacy) of a Database
// annotated dbv1.AnnotationDemoteAppRole=true, demotes it (demote) and
// runs roles.Apply again. nameErr is eng.CheckAppRole's verdict on the
// role's name.
func (s *syncer) applyRoles(ctx context.Context, db *dbv1.Database, eng engine.Engine, conn instance.Conn, super instance.Login, target roles.App) (res roles.Result, demoted bool, nameErr error, err error) {
	res, err = roles.Apply(ctx, conn, eng, target)
	// A role whose name no application's role may have (postgres, from a
	// user's Secret before issue 17) is not demoted: it would be refused
	// right after.
	nameErr = eng.CheckAppRole(target.Role)
	if err == nil && res.Legacy && nameErr == nil && db.Annotations[dbv1.AnnotationDemoteAppRole] == "true" {
		if err = s.demote(ctx, db, eng, super, target); err == nil {
			demoted = true
			res, err = roles.Apply(ctx, conn, eng, target)
		}
	}
	return res, demoted, nameErr, err
}

// appliedCondition is CredentialsReady once the server took the password
// of Secret appName at version (previous: the version the status said it
// had before), from what roles.Apply did (res) for target: a role that is
// still the bootstrap superuser, a rotation this controller made, or
// settled with what the server has.
func (s *syncer) appliedCondition(db *dbv1.Database, settled metav1.Condition, appName, version, previous string, target roles.App, res roles.Result, nameErr error) metav1.Condition {
	t := dbv1.ConditionCredentialsReady
	key := client.ObjectKeyFromObject(db)
	role := target.Role
	var cond metav1.Condition
	created := false
	for _, r := range res.Repairs {
		created = created || strings.HasPrefix(r, "created role ")
	}
	current := meta.FindStatusCondition(db.Status.Conditions, t)
	switch {
	case res.Legacy:
		cond = conditions.True(t, dbv1.ReasonLegacySuperuser, fmt.Sprintf(
			"role %s is the database's superuser (the Database was created before dbkeeper separated the application's role); "+
				"its password follows Secret %s (resourceVersion %s); annotate %s=true to make it an ordinary owner of its database (see docs/user-guide/credentials.md)",
			role, appName, version, dbv1.AnnotationDemoteAppRole))
		if nameErr != nil {
			cond.Message = fmt.Sprintf("role %s is the database's superuser (the Database was created before dbkeeper separated the application's role); "+
				"its password follows Secret %s (resourceVersion %s); it cannot be demoted in place (%v): move the application to a Secret with another username",
				role, appName, version, nameErr)
		}
		if current == nil || current.Reason != dbv1.ReasonLegacySuperuser {
			s.writer.Eventf(db, nil, corev1.EventTypeWarning, ReasonLegacySuperuser, "CheckRole", "%s", cond.Message)
		}
	case res.PasswordSet && !created:
		cond = conditions.True(t, dbv1.ReasonPasswordRotated, fmt.Sprintf(
			"set the password of role %s from Secret %s (resourceVersion %s)", role, appName, version))
		s.rotated.Store(key, rotation{version: version, message: cond.Message})
	case !res.Changed() && current != nil && current.Reason == dbv1.ReasonPasswordRotated && previous == version:
		// Rotated stays until the next change (no timestamps).
		cond = conditions.True(t, dbv1.ReasonPasswordRotated, current.Message)
	case !res.Changed() && s.rotatedAt(key, version) != "":
		// The same, when the Database read here predates the status that
		// said Rotated (the cache lags this controller's own write).
		cond = conditions.True(t, dbv1.ReasonPasswordRotated, s.rotatedAt(key, version))
	default:
		cond = settled
		cond.Message = fmt.Sprintf("%s; role %s has its password (resourceVersion %s) and owns database %s",
			settled.Message, role, version, target.Database)
	}
	return cond
}

// rotation is the last password this controller set on a Database's
// server: the Secret's resourceVersion and the condition's message.
type rotation struct {
	version, message string
}

// rotatedAt is the message of the rotation this controller made to the
// server of key at the Secret's version, or "" when it made none.
func (s *syncer) rotatedAt(key client.ObjectKey, version string) string {
	if v, ok := s.rotated.Load(key); ok && v.(rotation).version == version {
		return v.(rotation).message
	}
	return ""
}

// report logs and records as Events what Apply changed; names only.
func (s *syncer) report(ctx context.Context, db *dbv1.Database, app *corev1.Secret, role, database string, res roles.Result, demoted bool) {
	logger := log.FromContext(ctx).WithValues("Secret", klog.KObj(app), "role", role, "resourceVersion", app.ResourceVersion)
	if demoted {
		logger.Info("Demoted the application's role from the bootstrap superuser to the owner of its database")
		s.writer.Eventf(db, app, corev1.EventTypeNormal, ReasonAppRoleDemoted, "DemoteRole",
			"Role %s is now an ordinary owner of database %s; sessions opened before keep superuser rights until they reconnect", role, database)
	}
	if res.CreatedDatabase {
		logger.Info("Created the application's database", "database", database)
		s.writer.Eventf(db, app, corev1.EventTypeNormal, ReasonDatabaseCreated, "CreateDatabase", "Created database %s owned by role %s", database, role)
	}
	if len(res.Repairs) > 0 {
		logger.Info("Repaired the application's role", "repairs", res.Repairs)
		s.writer.Eventf(db, app, corev1.EventTypeNormal, ReasonRoleRepaired, "RepairRole", "Role %s: %s", role, strings.Join(res.Repairs, "; "))
	}
	if res.PasswordSet {
		logger.Info("Set the application's password on the server")
		s.writer.Eventf(db, app, corev1.EventTypeNormal, ReasonPasswordSet, "SetPassword",
			"Set the password of role %s from Secret %s (resourceVersion %s)", role, app.Name, app.ResourceVersion)
	}
}

// pendingOutcome is RotationPending: the server cannot be reached yet;
// the Database comes back with a growing delay.
func (s *syncer) pendingOutcome(ctx context.Context, db *dbv1.Database, out facet.Outcome, appName, version string, err error) facet.Outcome {
	key := client.ObjectKeyFromObject(db)
	delay := s.pending.Next(key)
	log.FromContext(ctx).V(1).Info("Waiting for the server", "Secret", klog.KRef(db.Namespace, appName), "error", err.Error(), "retry", delay)
	msg := fmt.Sprintf("the server does not have the password of Secret %s (resourceVersion %s) yet: %v", appName, version, err)
	if appliedVersion(db, appName) == version {
		msg = fmt.Sprintf("cannot check that the server has the password of Secret %s (resourceVersion %s): %v", appName, version, err)
	}
	out.Condition = conditions.False(dbv1.ConditionCredentialsReady, dbv1.ReasonRotationPending, msg)
	out.RequeueAfter = delay
	return out
}
