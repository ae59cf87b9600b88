package roles

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// syncer keeps the roles and databases of a Database's spec on its
// primary.
type syncer struct {
	// secrets reads Secrets' data from the API server (again only once a
	// Secret changed: instance.SecretReader); the cache holds no Secret
	// data.
	secrets client.Reader
	// instances connects to the primary.
	instances instance.Connector
	// writer records the Events; nil records none (tests).
	writer *facet.Writer
	// allowPrivileged is --allow-privileged-roles.
	allowPrivileged bool
	// pending maps a Database whose primary could not be reached to the
	// delay before the next attempt.
	pending facet.Backoff
}

// Sync implements facet.Syncer.
func (s *syncer) Sync(ctx context.Context, db *dbv1.Database) (facet.Outcome, error) {
	t := dbv1.ConditionRolesReady
	key := client.ObjectKeyFromObject(db)
	prev := previous(db)
	if len(db.Spec.Roles) == 0 && len(db.Spec.Databases) == 0 && len(prev.Roles)+len(prev.Databases)+len(prev.ReleasedRoles)+len(prev.ReleasedDatabases) == 0 {
		s.pending.Reset(key)
		return facet.Outcome{Condition: conditions.True(t, dbv1.ReasonRolesReconciled,
			"spec.roles and spec.databases are empty: the server has the application's role and database only, which CredentialsReady reports")}, nil
	}
	out := facet.Outcome{Status: s.CurrentStatus(db)}
	application, waiting, err := s.application(ctx, db)
	if err != nil || waiting != "" {
		out.Condition = conditions.False(t, dbv1.ReasonWaitingForCredentials, waiting)
		out.RequeueAfter = retryAfter
		return out, err
	}
	want := desired{roles: db.Spec.Roles, databases: db.Spec.Databases, app: application,
		allowPrivileged: s.allowPrivileged, previous: prev}
	if want.passwords, err = s.passwords(ctx, db); err != nil {
		return out, err
	}

	login, err := instance.SuperuserLogin(ctx, s.secrets, db)
	if apierrors.IsNotFound(err) {
		return s.waiting(ctx, db, out, fmt.Errorf("%w (the secret controller creates it)", err)), nil
	}
	if err != nil {
		return out, err
	}
	conn, err := s.instances.Connect(ctx, db, login, "")
	if err != nil {
		return s.waiting(ctx, db, out, err), nil
	}
	defer func() { _ = conn.Close(ctx) }()
	roleNames, databaseNames := lookedAt(want)
	seen, err := observe(ctx, conn, roleNames, databaseNames)
	if err != nil {
		if instance.Unreachable(err) {
			return s.waiting(ctx, db, out, err), nil
		}
		return out, err
	}
	if seen.Recovery {
		return s.waiting(ctx, db, out, fmt.Errorf("%s is a standby (a switchover or failover is under way)", instance.PrimaryName(db))), nil
	}
	p := planFor(want, seen)
	failed, failures, err := s.apply(ctx, db, conn, login, p)
	if err != nil {
		return s.waiting(ctx, db, out, err), nil
	}
	s.pending.Reset(key)
	for _, r := range p.released {
		log.FromContext(ctx).Info("Leaving a role or database that left the spec as it is on the server", "object", r)
		s.event(db, ReasonReleased, "Release", "%s left the spec: left on the server as it is, no longer kept (status.roles)", r)
	}
	st := p.status
	st.Roles = slices.DeleteFunc(st.Roles, func(n string) bool { return failed["role "+n] && seen.role(n) == nil })
	st.Databases = slices.DeleteFunc(st.Databases, func(n string) bool { return failed["database "+n] && seen.database(n) == nil })
	out.Status = statusOf(st)
	out.Condition = verdict(st, append(p.problems, failures...))
	out.RequeueAfter = resyncAfter
	if out.Condition.Reason == dbv1.ReasonDropRefused || out.Condition.Reason == dbv1.ReasonWaitingForCredentials {
		out.RequeueAfter = retryAfter
	}
	return out, nil
}

// application is the application's role and database, from its
// credentials Secret; waiting says why they are not known yet.
func (s *syncer) application(ctx context.Context, db *dbv1.Database) (app, string, error) {
	name := resources.CredentialsSecretName(db)
	role, database, err := instance.Application(ctx, s.secrets, db)
	switch {
	case apierrors.IsNotFound(err):
		return app{}, fmt.Sprintf("the credentials Secret %s is not there yet (see CredentialsReady): the application's role and database, which spec.roles and spec.databases may not take, are not known", name), nil
	case err != nil:
		return app{}, "", err
	case role == "":
		return app{}, fmt.Sprintf("the credentials Secret %s has no %s (see CredentialsReady): the application's role, which spec.roles may not take, is not known", name, engine.UsernameKey), nil
	}
	return app{role: role, database: database}, "", nil
}

// passwords reads the passwords of the Present roles with a
// passwordSecret; a Secret that cannot be used is a problem of its role.
func (s *syncer) passwords(ctx context.Context, db *dbv1.Database) (map[string]password, error) {
	out := map[string]password{}
	read := map[string]*corev1.Secret{}
	for i, r := range db.Spec.Roles {
		ref := r.PasswordSecret
		if ref == nil || !r.Present() {
			continue
		}
		entry := entryOf("roles", i, r.Name)
		refuse := func(reason, format string, args ...any) {
			out[r.Name] = password{problem: &problem{reason: reason, message: entry + ": " + fmt.Sprintf(format, args...) + "; the role keeps the password it has"}}
		}
		sec, ok := read[ref.Name]
		if !ok {
			sec = &corev1.Secret{}
			err := s.secrets.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: ref.Name}, sec)
			if apierrors.IsNotFound(err) {
				sec = nil
			} else if err != nil {
				return nil, fmt.Errorf("getting Secret %s: %w", ref.Name, err)
			}
			read[ref.Name] = sec
		}
		value, has := []byte(nil), false
		if sec != nil {
			value, has = sec.Data[ref.PasswordKey()]
		}
		switch {
		case sec == nil:
			refuse(dbv1.ReasonPasswordSecretMissing, "Secret %s named in passwordSecret does not exist: create it with the key %s", ref.Name, ref.PasswordKey())
		case !optedIn(sec, db.Name):
			refuse(dbv1.ReasonPasswordSecretNotOptedIn, "Secret %s named in passwordSecret does not say this Database may use it: add the annotation %s: %s to it",
				ref.Name, dbv1.AnnotationCredentialsFor, db.Name)
		case !has:
			refuse(dbv1.ReasonPasswordSecretMissing, "Secret %s named in passwordSecret has no key %s", ref.Name, ref.PasswordKey())
		default:
			if err := engine.CheckPassword(string(value)); err != nil {
				refuse(dbv1.ReasonPasswordSecretMissing, "Secret %s, key %s: %v", ref.Name, ref.PasswordKey(), err)
				continue
			}
			out[r.Name] = password{value: string(value)}
		}
	}
	return out, nil
}

// optedIn reports whether sec's AnnotationCredentialsFor names the
// Database called name: a Secret of the user's is used only when it says
// so (docs/design/security.md).
func optedIn(sec *corev1.Secret, name string) bool {
	for _, n := range strings.Split(sec.Annotations[dbv1.AnnotationCredentialsFor], ",") {
		if strings.TrimSpace(n) == name {
			return true
		}
	}
	return false
}

// waiting is WaitingForPrimary: the primary cannot be reached (or written)
// yet; the Database comes back with a growing delay.
func (s *syncer) waiting(ctx context.Context, db *dbv1.Database, out facet.Outcome, err error) facet.Outcome {
	key := client.ObjectKeyFromObject(db)
	delay := s.pending.Next(key)
	log.FromContext(ctx).V(1).Info("Waiting for the primary", "error", err.Error(), "retry", delay)
	out.Condition = conditions.False(dbv1.ConditionRolesReady, dbv1.ReasonWaitingForPrimary, fmt.Sprintf(
		"cannot reach the primary to keep spec.roles and spec.databases: %v; retrying", err))
	out.RequeueAfter = delay
	return out
}

// order is which problem names the condition's reason when there are
// several: what the user must change first.
var order = []string{
	dbv1.ReasonRoleRefused, dbv1.ReasonDatabaseRefused, dbv1.ReasonPasswordSecretNotOptedIn,
	dbv1.ReasonPasswordSecretMissing, dbv1.ReasonDropRefused, dbv1.ReasonWaitingForCredentials,
}

// maxMessage is how much of the problems RolesReady's message says.
const maxMessage = 16000

// verdict is RolesReady once the plan ran: True when nothing is wrong,
// else False with the first problem's reason and every problem said.
func verdict(st dbv1.RolesStatus, problems []problem) metav1.Condition {
	t := dbv1.ConditionRolesReady
	if len(problems) == 0 {
		msg := fmt.Sprintf("the %s of spec.roles and the %s of spec.databases are on the primary as declared", count(len(st.Roles), "role"), count(len(st.Databases), "database"))
		var released []string
		for _, r := range st.ReleasedRoles {
			released = append(released, "role "+r)
		}
		for _, d := range st.ReleasedDatabases {
			released = append(released, "database "+d)
		}
		if len(released) > 0 {
			msg += "; left on the server as they are since they left the spec: " + strings.Join(released, ", ")
		}
		return conditions.True(t, dbv1.ReasonRolesReconciled, msg)
	}
	slices.SortStableFunc(problems, func(a, b problem) int {
		return slices.Index(order, a.reason) - slices.Index(order, b.reason)
	})
	msgs := make([]string, 0, len(problems))
	for _, p := range problems {
		msgs = append(msgs, p.message)
	}
	// 64 roles and 64 databases could each have a problem: the message
	// stays well below the API's 32768 characters
	return conditions.False(t, problems[0].reason, conditions.Quote(strings.Join(msgs, "; "), maxMessage)+"; the rest of spec.roles and spec.databases is applied")
}

// count is "1 role", "2 roles".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// previous is status.roles as the Database has it.
func previous(db *dbv1.Database) dbv1.RolesStatus {
	if db.Status.Roles == nil {
		return dbv1.RolesStatus{}
	}
	return *db.Status.Roles
}

// CurrentStatus implements facet.Syncer.
func (s *syncer) CurrentStatus(db *dbv1.Database) *dbv1ac.DatabaseStatusApplyConfiguration {
	return statusOf(previous(db))
}

// statusOf is status.roles of st; nil when it lists nothing.
func statusOf(st dbv1.RolesStatus) *dbv1ac.DatabaseStatusApplyConfiguration {
	if len(st.Roles)+len(st.Databases)+len(st.ReleasedRoles)+len(st.ReleasedDatabases) == 0 {
		return nil
	}
	ac := dbv1ac.RolesStatus()
	if len(st.Roles) > 0 {
		ac.WithRoles(st.Roles...)
	}
	if len(st.Databases) > 0 {
		ac.WithDatabases(st.Databases...)
	}
	if len(st.ReleasedRoles) > 0 {
		ac.WithReleasedRoles(st.ReleasedRoles...)
	}
	if len(st.ReleasedDatabases) > 0 {
		ac.WithReleasedDatabases(st.ReleasedDatabases...)
	}
	return dbv1ac.DatabaseStatus().WithRoles(ac)
}

func (s *syncer) event(db *dbv1.Database, reason, action, note string, args ...any) {
	if s.writer != nil {
		s.writer.Eventf(db, nil, corev1.EventTypeNormal, reason, action, note, args...)
	}
}
