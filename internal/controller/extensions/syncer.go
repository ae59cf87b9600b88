package extensions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
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

// syncer keeps spec.postgresql.extensions in the application's database
// on the primary.
type syncer struct {
	// secrets reads the superuser's and the credentials Secrets from the
	// API server (the cache holds no Secret data).
	secrets client.Reader
	// instances connects to the primary.
	instances instance.Connector
	// writer records the Events; nil records none (tests).
	writer *facet.Writer
	// pending maps a Database whose primary could not be reached to the
	// delay before the next attempt.
	pending facet.Backoff
}

// Sync implements facet.Syncer.
func (s *syncer) Sync(ctx context.Context, db *dbv1.Database) (facet.Outcome, error) {
	t := dbv1.ConditionExtensionsReady
	key := client.ObjectKeyFromObject(db)
	spec := db.Spec.PostgreSQL.Extensions
	if len(spec) == 0 {
		s.pending.Reset(key)
		return facet.Outcome{Condition: conditions.True(t, dbv1.ReasonExtensionsReconciled,
			"spec.postgresql.extensions is empty: the application's database has what initdb and the application made")}, nil
	}
	database, err := s.applicationDatabase(ctx, db)
	if err != nil {
		return s.waiting(ctx, db, err), nil
	}
	conn, err := instance.ConnectAsSuperuser(ctx, s.instances, s.secrets, db, database)
	if apierrors.IsNotFound(err) {
		return s.waiting(ctx, db, fmt.Errorf("%w (the secret controller creates it)", err)), nil
	}
	if err != nil {
		if instance.Unreachable(err) {
			return s.waiting(ctx, db, err), nil
		}
		if noDatabase(err) {
			// the secret controller makes it once the server runs
			return s.waiting(ctx, db, fmt.Errorf("the application's database %s is not there yet (see CredentialsReady)", database)), nil
		}
		return facet.Outcome{}, err
	}
	defer func() { _ = conn.Close(ctx) }()
	named := names(spec)
	seen, err := observe(ctx, conn, named)
	if err != nil {
		if instance.Unreachable(err) {
			return s.waiting(ctx, db, err), nil
		}
		return facet.Outcome{}, err
	}
	if seen.Recovery {
		return s.waiting(ctx, db, fmt.Errorf("%s is a standby (a switchover or failover is under way)", instance.PrimaryName(db))), nil
	}
	p := planFor(spec, seen)
	problems := p.problems
	ran := false
	for _, st := range p.steps {
		logger := log.FromContext(ctx).WithValues("entry", st.entry)
		logger.Info("Running a step of spec.postgresql.extensions", "step", st.note, "database", database)
		if _, err := conn.Exec(ctx, st.sql); err != nil {
			if instance.Unreachable(err) {
				return s.waiting(ctx, db, err), nil
			}
			logger.Info("The server refused a step of spec.postgresql.extensions", "step", st.note, "error", err.Error())
			problems = append(problems, problem{dbv1.ReasonExtensionRefused, fmt.Sprintf("%s: the server refused the statement that would have %s: %s",
				st.entry, st.note, conditions.Quote(instance.ServerError(err), 1024))})
			continue
		}
		ran = true
		if s.writer != nil {
			s.writer.Eventf(db, nil, corev1.EventTypeNormal, st.event, "Apply", "In database %s: %s", database, st.note)
		}
	}
	if ran {
		// what is installed now, for the message
		if seen, err = observe(ctx, conn, named); err != nil {
			return s.waiting(ctx, db, err), nil
		}
	}
	s.pending.Reset(key)
	out := facet.Outcome{Condition: verdict(spec, seen, database, problems), RequeueAfter: resyncAfter}
	if out.Condition.Status != metav1.ConditionTrue {
		out.RequeueAfter = retryAfter
	}
	return out, nil
}

// noDatabase says whether err is the server's "database does not exist".
func noDatabase(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "3D000"
}

// applicationDatabase is the application's database, from the credentials
// Secret.
func (s *syncer) applicationDatabase(ctx context.Context, db *dbv1.Database) (string, error) {
	name := resources.CredentialsSecretName(db)
	sec := &corev1.Secret{}
	if err := s.secrets.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("the credentials Secret %s is not there yet (see CredentialsReady): the application's database is not known", name)
		}
		return "", fmt.Errorf("getting Secret %s: %w", name, err)
	}
	return engine.AppDatabase(sec.Data), nil
}

// observe reads what the server has of the extensions named.
func observe(ctx context.Context, conn instance.Conn, names []string) (catalog, error) {
	arr, err := engine.TextArray(names)
	if err != nil {
		return catalog{}, err
	}
	sql := `SELECT json_build_object(
	'recovery', pg_catalog.pg_is_in_recovery(),
	'preloaded', pg_catalog.current_setting('shared_preload_libraries'),
	'serverVersion', pg_catalog.current_setting('server_version'),
	'available', COALESCE((SELECT json_agg(json_build_object('name', name, 'installed', COALESCE(installed_version, '')))
		FROM pg_catalog.pg_available_extensions WHERE name = ANY(` + arr + `)), '[]'),
	'versions', COALESCE((SELECT json_agg(json_build_object('name', name, 'version', version))
		FROM pg_catalog.pg_available_extension_versions WHERE name = ANY(` + arr + `)), '[]'))::text`
	v, ok, err := conn.QueryValue(ctx, sql)
	if err != nil {
		return catalog{}, fmt.Errorf("reading the extensions: %w", err)
	}
	if !ok || v == nil {
		return catalog{}, errors.New("reading the extensions: no answer")
	}
	var c catalog
	if err := json.Unmarshal([]byte(*v), &c); err != nil {
		return catalog{}, fmt.Errorf("reading the extensions: %w", err)
	}
	return c, nil
}

// order is which problem names the condition's reason when there are
// several: what the user must change first.
var order = []string{dbv1.ReasonExtensionUnavailable, dbv1.ReasonExtensionRefused, dbv1.ReasonWaitingForPreload}

// verdict is ExtensionsReady once the plan ran.
func verdict(spec []dbv1.ExtensionSpec, seen catalog, database string, problems []problem) metav1.Condition {
	t := dbv1.ConditionExtensionsReady
	if len(problems) == 0 {
		var have, absent []string
		for _, e := range spec {
			if !e.Present() {
				absent = append(absent, e.Name)
			} else if a, ok := seen.available(e.Name); ok && a.Installed != "" {
				have = append(have, e.Name+" "+a.Installed)
			}
		}
		msg := fmt.Sprintf("in database %s: %s", database, strings.Join(have, ", "))
		if len(have) == 0 {
			msg = "in database " + database + ": no extension to keep"
		}
		if len(absent) > 0 {
			msg += "; not there (ensure: Absent): " + strings.Join(absent, ", ")
		}
		return conditions.True(t, dbv1.ReasonExtensionsReconciled, msg)
	}
	slices.SortStableFunc(problems, func(a, b problem) int {
		return slices.Index(order, a.reason) - slices.Index(order, b.reason)
	})
	reason := problems[0].reason
	msgs := make([]string, 0, len(problems))
	for _, p := range problems {
		msgs = append(msgs, p.message)
	}
	return conditions.False(t, reason, conditions.Quote(strings.Join(msgs, "; "), maxMessage)+"; the rest of spec.postgresql.extensions is applied")
}

// maxMessage is how much of the problems ExtensionsReady's message says.
const maxMessage = 16000

// waiting is WaitingForPrimary: the primary cannot be reached (or written)
// yet; the Database comes back with a growing delay.
func (s *syncer) waiting(ctx context.Context, db *dbv1.Database, err error) facet.Outcome {
	key := client.ObjectKeyFromObject(db)
	delay := s.pending.Next(key)
	log.FromContext(ctx).V(1).Info("Waiting for the primary", "error", err.Error(), "retry", delay)
	return facet.Outcome{RequeueAfter: delay, Condition: conditions.False(dbv1.ConditionExtensionsReady, dbv1.ReasonExtensionsWaitingForPrimary,
		fmt.Sprintf("cannot reach the primary to keep spec.postgresql.extensions: %v; retrying", err))}
}

// CurrentStatus implements facet.Syncer: the controller writes no status
// field but its condition.
func (s *syncer) CurrentStatus(*dbv1.Database) *dbv1ac.DatabaseStatusApplyConfiguration { return nil }
