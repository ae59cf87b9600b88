package secret

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
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

// Backoff of a Database whose server cannot be reached yet: the first
// retry after pendingFirst, doubling up to pendingMax. A pod that turns
// Ready brings the Database back sooner (the pod watch).
const (
	pendingFirst = time.Second
	pendingMax   = time.Minute
)

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
		s.pending.Delete(key)
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
		s.pending.Delete(key)
		out.Condition = *failed
		out.RequeueAfter = Resync
		return out, nil
	}
	defer func() { _ = conn.Close(ctx) }()

	target := roles.App{Role: role, Database: engine.AppDatabase(app.Data), Password: password}
	res, err := roles.Apply(ctx, conn, eng, target)
	demoted := false
	// A role whose name no application's role may have (postgres, from a
	// user's Secret before issue 17) is not demoted: it would be refused
	// right after.
	nameErr := eng.CheckAppRole(role)
	if err == nil && res.Legacy && nameErr == nil && db.Annotations[dbv1.AnnotationDemoteAppRole] == "true" {
		if err = s.demote(ctx, db, eng, super.login, target); err == nil {
			demoted = true
			res, err = roles.Apply(ctx, conn, eng, target)
		}
	}
	if err != nil {
		if sqlconn.Unreachable(err) {
			return s.pendingOutcome(ctx, db, out, appName, version, err), nil
		}
		s.pending.Delete(key)
		log.FromContext(ctx).Info("The server refused the credentials", "Secret", klog.KRef(db.Namespace, appName), "role", role, "error", err.Error())
		out.Condition = conditions.False(t, dbv1.ReasonRotationFailed, fmt.Sprintf(
			"Secret %s (resourceVersion %s): %v; nothing was changed", appName, version, err))
		out.RequeueAfter = Resync
		return out, nil
	}
	s.pending.Delete(key)
	s.report(ctx, db, app, role, target.Database, res, demoted)
	out.Status = credentialsStatus(db, version)
	out.RequeueAfter = Resync
	created := false
	for _, r := range res.Repairs {
		created = created || strings.HasPrefix(r, "created role ")
	}
	current := meta.FindStatusCondition(db.Status.Conditions, t)
	switch {
	case res.Legacy:
		out.Condition = conditions.True(t, dbv1.ReasonLegacySuperuser, fmt.Sprintf(
			"role %s is the database's superuser (the Database was created before dbkeeper separated the application's role); "+
				"its password follows Secret %s (resourceVersion %s); annotate %s=true to make it an ordinary owner of its database (see docs/user-guide.md, Credentials)",
			role, appName, version, dbv1.AnnotationDemoteAppRole))
		if nameErr != nil {
			out.Condition.Message = fmt.Sprintf("role %s is the database's superuser (the Database was created before dbkeeper separated the application's role); "+
				"its password follows Secret %s (resourceVersion %s); it cannot be demoted in place (%v): move the application to a Secret with another username",
				role, appName, version, nameErr)
		}
		if current == nil || current.Reason != dbv1.ReasonLegacySuperuser {
			s.writer.Eventf(db, nil, corev1.EventTypeWarning, ReasonLegacySuperuser, "CheckRole", "%s", out.Condition.Message)
		}
	case res.PasswordSet && !created:
		out.Condition = conditions.True(t, dbv1.ReasonPasswordRotated, fmt.Sprintf(
			"set the password of role %s from Secret %s (resourceVersion %s)", role, appName, version))
		s.rotated.Store(key, rotation{version: version, message: out.Condition.Message})
	case !res.Changed() && current != nil && current.Reason == dbv1.ReasonPasswordRotated && previous == version:
		// Rotated stays until the next change (no timestamps).
		out.Condition = conditions.True(t, dbv1.ReasonPasswordRotated, current.Message)
	case !res.Changed() && s.rotatedAt(key, version) != "":
		// The same, when the Database read here predates the status that
		// said Rotated (the cache lags this controller's own write).
		out.Condition = conditions.True(t, dbv1.ReasonPasswordRotated, s.rotatedAt(key, version))
	default:
		out.Condition = settled
		out.Condition.Message = fmt.Sprintf("%s; role %s has its password (resourceVersion %s) and owns database %s",
			settled.Message, role, version, target.Database)
	}
	return out, nil
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
	delay := pendingFirst
	if v, ok := s.pending.Load(key); ok {
		delay = min(2*v.(time.Duration), pendingMax)
	}
	s.pending.Store(key, delay)
	log.FromContext(ctx).V(1).Info("Waiting for the server", "Secret", klog.KRef(db.Namespace, appName), "error", err.Error(), "retry", delay)
	msg := fmt.Sprintf("the server does not have the password of Secret %s (resourceVersion %s) yet: %v", appName, version, err)
	if appliedVersion(db, appName) == version {
		msg = fmt.Sprintf("cannot check that the server has the password of Secret %s (resourceVersion %s): %v", appName, version, err)
	}
	out.Condition = conditions.False(dbv1.ConditionCredentialsReady, dbv1.ReasonRotationPending, msg)
	out.RequeueAfter = delay
	return out
}

// superuser is the outcome of ensureSuperuser.
type superuser struct {
	login instance.Login
	// failed is the condition of a superuser Secret dbkeeper cannot use.
	failed *metav1.Condition
}

// ensureSuperuser creates <name>-superuser once, with a new password,
// and never regenerates it (the server keeps the first), like the
// generated credentials Secret; it keeps its labels and returns its login,
// read from the API server.
func (s *syncer) ensureSuperuser(ctx context.Context, db *dbv1.Database, eng engine.Engine, appRole string) (superuser, error) {
	name := resources.SuperuserSecretName(db)
	key := client.ObjectKey{Namespace: db.Namespace, Name: name}
	sec, err := apply.Live(ctx, s.reader, key, &corev1.Secret{})
	if err != nil {
		return superuser{}, fmt.Errorf("getting Secret %s: %w", name, err)
	}
	if sec == nil {
		password, err := NewPassword()
		if err != nil {
			return superuser{}, err
		}
		sec = resources.SuperuserSecret(db, resources.SuperuserName(eng, appRole), password)
		s.marks.Key.Mark(sec, engine.PasswordKey)
		log.FromContext(ctx).Info("Generating superuser Secret", "Secret", klog.KObj(sec))
		err = s.client.Create(ctx, sec, client.FieldOwner(facet.FieldOwner(Name)))
		if apierrors.IsAlreadyExists(err) {
			return superuser{}, fmt.Errorf("creating Secret %s: it appeared meanwhile, reading it next time: %w", name, err)
		}
		if err != nil {
			return superuser{}, fmt.Errorf("creating Secret %s: %w", name, err)
		}
	} else {
		// A superuser Secret planted before the Database would choose
		// the superuser's password: refused unless dbkeeper made it.
		if err := s.made(ctx, db, sec); err != nil {
			return superuser{}, err
		}
		// The Writer refuses one that is not labelled dbkeeper's for this
		// name (facet.NotOursError) before its login is used.
		partial := &metav1.PartialObjectMetadata{}
		partial.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		partial.ObjectMeta = sec.ObjectMeta
		if _, err := s.writer.Apply(ctx, partial, resources.SuperuserSecretMetadata(db)); err != nil {
			return superuser{}, fmt.Errorf("applying metadata of Secret %s: %w", name, err)
		}
	}
	login := instance.Login{User: string(sec.Data[engine.UsernameKey]), Password: string(sec.Data[engine.PasswordKey]), Superuser: true}
	if login.User == "" || login.Password == "" {
		cond := conditions.False(dbv1.ConditionCredentialsReady, dbv1.ReasonSecretInvalid, fmt.Sprintf(
			"Secret %s lacks the key %s or %s: dbkeeper never generates a second superuser password, since the server keeps the first; put it back",
			name, engine.UsernameKey, engine.PasswordKey))
		return superuser{failed: &cond}, nil
	}
	return superuser{login: login}, nil
}

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
