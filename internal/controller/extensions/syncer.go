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
// and spec.databases[].extensions in theirs, on the primary.
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

// target is one database whose extensions the controller keeps.
type target struct {
	// field is the spec's list, for messages ("spec.postgresql.extensions").
	field    string
	database string
	spec     []dbv1.ExtensionSpec
	// listed: a database of spec.databases, which the roles controller
	// creates (the application's is the secret controller's).
	listed bool
}

// result is what Sync found and did in one target.
type result struct {
	target
	seen     catalog
	problems []problem
}

// targets are the databases with extensions to keep: the application's
// (spec.postgresql.extensions, its name read from the credentials Secret
// only when it has any), then each present database of spec.databases
// with extensions.
func (s *syncer) targets(ctx context.Context, db *dbv1.Database) ([]target, error) {
	var out []target
	if spec := db.Spec.PostgreSQL.Extensions; len(spec) > 0 {
		database, err := s.applicationDatabase(ctx, db)
		if err != nil {
			return nil, err
		}
		out = append(out, target{field: "spec.postgresql.extensions", database: database, spec: spec})
	}
	for i, d := range db.Spec.Databases {
		if d.Present() && len(d.Extensions) > 0 {
			out = append(out, target{field: fmt.Sprintf("spec.databases[%d].extensions", i), database: d.Name, spec: d.Extensions, listed: true})
		}
	}
	return out, nil
}

// Sync implements facet.Syncer.
func (s *syncer) Sync(ctx context.Context, db *dbv1.Database) (facet.Outcome, error) {
	t := dbv1.ConditionExtensionsReady
	key := client.ObjectKeyFromObject(db)
	if len(db.Spec.PostgreSQL.Extensions) == 0 && !slices.ContainsFunc(db.Spec.Databases, func(d dbv1.ServerDatabaseSpec) bool {
		return d.Present() && len(d.Extensions) > 0
	}) {
		s.pending.Reset(key)
		return facet.Outcome{Condition: conditions.True(t, dbv1.ReasonExtensionsReconciled,
			"spec.postgresql.extensions and spec.databases[].extensions are empty: the databases have what initdb and their users made")}, nil
	}
	targets, err := s.targets(ctx, db)
	if err != nil {
		return s.waiting(ctx, db, err), nil
	}
	results := make([]result, 0, len(targets))
	for _, tg := range targets {
		r, waitErr, err := s.keep(ctx, db, tg)
		if err != nil {
			return facet.Outcome{}, err
		}
		if waitErr != nil {
			return s.waiting(ctx, db, waitErr), nil
		}
		results = append(results, r)
	}
	s.pending.Reset(key)
	out := facet.Outcome{Condition: verdict(results), RequeueAfter: resyncAfter}
	if out.Condition.Status != metav1.ConditionTrue {
		out.RequeueAfter = retryAfter
	}
	return out, nil
}

// keep brings one target's database on the primary to its extensions. A
// primary that cannot be reached (or written) yet is waitErr; a database
// of spec.databases not created yet is a problem of its result.
func (s *syncer) keep(ctx context.Context, db *dbv1.Database, tg target) (r result, waitErr, err error) {
	r.target = tg
	conn, err := instance.ConnectAsSuperuser(ctx, s.instances, s.secrets, db, tg.database)
	switch {
	case apierrors.IsNotFound(err):
		return r, fmt.Errorf("%w (the secret controller creates it)", err), nil
	case err != nil && instance.Unreachable(err):
		return r, err, nil
	case err != nil && noDatabase(err) && tg.listed:
		r.problems = []problem{{dbv1.ReasonExtensionsWaitingForDatabase, fmt.Sprintf(
			"%s: database %s is not on the server yet (the roles controller creates it: RolesReady)", tg.field, tg.database)}}
		return r, nil, nil
	case err != nil && noDatabase(err):
		// the secret controller makes it once the server runs
		return r, fmt.Errorf("the application's database %s is not there yet (see CredentialsReady)", tg.database), nil
	case err != nil:
		return r, nil, err
	}
	defer func() { _ = conn.Close(ctx) }()
	named := names(tg.spec)
	if r.seen, err = observe(ctx, conn, named); err != nil {
		if instance.Unreachable(err) {
			return r, err, nil
		}
		return r, nil, err
	}
	if r.seen.Recovery {
		return r, fmt.Errorf("%s is a standby (a switchover or failover is under way)", instance.PrimaryName(db)), nil
	}
	p := planFor(tg.field, tg.spec, r.seen)
	r.problems = p.problems
	ran := false
	for _, st := range p.steps {
		logger := log.FromContext(ctx).WithValues("entry", st.entry)
		logger.Info("Running a step of the extensions", "step", st.note, "database", tg.database)
		if _, err := conn.Exec(ctx, st.sql); err != nil {
			if instance.Unreachable(err) {
				return r, err, nil
			}
			logger.Info("The server refused a step of the extensions", "step", st.note, "error", err.Error())
			r.problems = append(r.problems, problem{dbv1.ReasonExtensionRefused, fmt.Sprintf("%s: the server refused the statement that would have %s: %s",
				st.entry, st.note, conditions.Quote(instance.ServerError(err), 1024))})
			continue
		}
		ran = true
		if s.writer != nil {
			s.writer.Eventf(db, nil, corev1.EventTypeNormal, st.event, "Apply", "In database %s: %s", tg.database, st.note)
		}
	}
	if ran {
		// what is installed now, for the message
		if r.seen, err = observe(ctx, conn, named); err != nil {
			return r, err, nil
		}
	}
	return r, nil, nil
}

// noDatabase says whether err is the server's "database does not exist".
func noDatabase(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "3D000"
}

// applicationDatabase is the application's database, from the credentials
// Secret.
func (s *syncer) applicationDatabase(ctx context.Context, db *dbv1.Database) (string, error) {
	_, database, err := instance.Application(ctx, s.secrets, db)
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("the credentials Secret %s is not there yet (see CredentialsReady): the application's database is not known",
			resources.CredentialsSecretName(db))
	}
	return database, err
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
	'available', COALESCE((SELECT json_agg(json_build_object('name', a.name, 'installed', COALESCE(a.installed_version, ''),
			'schema', COALESCE(n.nspname, '')))
		FROM pg_catalog.pg_available_extensions a
		LEFT JOIN pg_catalog.pg_extension x ON x.extname = a.name
		LEFT JOIN pg_catalog.pg_namespace n ON n.oid = x.extnamespace
		WHERE a.name = ANY(` + arr + `)), '[]'),
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
var order = []string{dbv1.ReasonExtensionUnavailable, dbv1.ReasonExtensionRefused, dbv1.ReasonWaitingForPreload,
	dbv1.ReasonExtensionsWaitingForDatabase}

// verdict is ExtensionsReady once every target's plan ran.
func verdict(results []result) metav1.Condition {
	t := dbv1.ConditionExtensionsReady
	var problems []problem
	var kept []string
	for _, r := range results {
		problems = append(problems, r.problems...)
		var have, absent []string
		for _, e := range r.spec {
			if !e.Present() {
				absent = append(absent, e.Name)
			} else if a, ok := r.seen.available(e.Name); ok && a.Installed != "" {
				have = append(have, e.Name+" "+a.Installed)
			}
		}
		msg := fmt.Sprintf("in database %s: %s", r.database, strings.Join(have, ", "))
		if len(have) == 0 {
			msg = "in database " + r.database + ": no extension to keep"
		}
		if len(absent) > 0 {
			msg += "; not there (ensure: Absent): " + strings.Join(absent, ", ")
		}
		kept = append(kept, msg)
	}
	if len(problems) == 0 {
		return conditions.True(t, dbv1.ReasonExtensionsReconciled, strings.Join(kept, "; "))
	}
	slices.SortStableFunc(problems, func(a, b problem) int {
		return slices.Index(order, a.reason) - slices.Index(order, b.reason)
	})
	reason := problems[0].reason
	msgs := make([]string, 0, len(problems))
	for _, p := range problems {
		msgs = append(msgs, p.message)
	}
	return conditions.False(t, reason, conditions.Quote(strings.Join(msgs, "; "), maxMessage)+"; the rest of the extensions is applied")
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
		fmt.Sprintf("cannot reach the primary to keep the extensions: %v; retrying", err))}
}

// CurrentStatus implements facet.Syncer: the controller writes no status
// field but its condition.
func (s *syncer) CurrentStatus(*dbv1.Database) *dbv1ac.DatabaseStatusApplyConfiguration { return nil }
