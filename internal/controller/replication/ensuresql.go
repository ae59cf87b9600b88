package replication

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/internal/roles"
)

// sqlOutcome is what ensureSQL did not finish.
type sqlOutcome struct {
	// wait says what it waits for before the standbys can be cloned, ""
	// when nothing.
	wait string
	// notes are what ReplicationReady's message says of the slots.
	notes []string
}

// ensureSQL keeps the replication role (with the replication Secret's
// password, as a SCRAM verifier) and one physical slot per standby on the
// primary (ensureSlots: made again when invalidated), and drops dbkeeper's
// inactive slots of instances that no longer exist. Its outcome says what
// it waits for ("" when all is in place) and what the slots' states add to
// ReplicationReady's message. Once all is in place for a fingerprint
// (primary, password, slots, synchronous standbys) the next passes only
// list the slots, a query on the primary: a slot is invalidated
// (wal_status lost) without anything in the fingerprint changing.
func (s *syncer) ensureSQL(ctx context.Context, db *dbv1.Database, plan *Plan, pods map[string]*corev1.Pod) (sqlOutcome, error) {
	password, out, err := s.replicationPassword(ctx, db, plan)
	if password == "" || err != nil {
		return out, err
	}
	if s.instances == nil {
		return sqlOutcome{}, fmt.Errorf("no connector to the Databases' servers")
	}
	sum := sha256.Sum256([]byte(password))
	fingerprint := plan.CurrentPrimary + "|" + hex.EncodeToString(sum[:]) + "|" + strings.Join(plan.Slots, ",") + "|" + standbyNames(plan.WantSynchronous)
	conn, out, done := s.checkEnsured(ctx, db, plan, pods, fingerprint)
	if done {
		return out, nil
	}
	if conn == nil {
		c, err := instance.ConnectAsSuperuser(ctx, s.instances, s.reader, db, "")
		if err != nil {
			return sqlOutcome{}, err
		}
		conn = c
	}
	defer func() { _ = conn.Close(ctx) }()
	return s.ensureOnPrimary(ctx, conn, db, plan, pods, password, fingerprint)
}

// replicationPassword is the replication Secret's password; "" with what
// to wait for when there is none (nothing when one instance runs:
// nothing streams).
func (s *syncer) replicationPassword(ctx context.Context, db *dbv1.Database, plan *Plan) (string, sqlOutcome, error) {
	name := resources.ReplicationSecretName(db)
	sec, err := apply.Live(ctx, s.reader, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.Secret{})
	if err != nil {
		return "", sqlOutcome{}, fmt.Errorf("getting Secret %s: %w", name, err)
	}
	password := ""
	if sec != nil {
		password = string(sec.Data[resources.ReplicationPasswordKey])
	}
	if password == "" && len(plan.Slots) > 0 {
		return "", sqlOutcome{wait: fmt.Sprintf("waiting for Secret %s with key %s to create the standbys", name, resources.ReplicationPasswordKey)}, nil
	}
	return password, sqlOutcome{}, nil
}

// checkEnsured: when all was in place for fingerprint, only the slots are
// listed (done, unless one must be mended: then the connection is
// returned, open, for ensureOnPrimary). A failed check leaves the
// condition as it is and is tried again on the next pass.
func (s *syncer) checkEnsured(ctx context.Context, db *dbv1.Database, plan *Plan, pods map[string]*corev1.Pod, fingerprint string) (instance.Conn, sqlOutcome, bool) {
	if v, ok := s.ensured.Load(db.UID); !ok || v.(string) != fingerprint {
		return nil, sqlOutcome{}, false
	}
	plan.Synchronous, plan.SynchronousSet = plan.SynchronousRecord, true
	if len(plan.Slots) == 0 {
		return nil, sqlOutcome{}, true // no standby: no slot to lose
	}
	conn, err := instance.ConnectAsSuperuser(ctx, s.instances, s.reader, db, "")
	if err != nil {
		log.FromContext(ctx).Info("Cannot check the replication slots on the primary", "primary", plan.CurrentPrimary, "error", err.Error())
		return nil, sqlOutcome{}, true
	}
	have, err := listSlots(ctx, conn)
	if err != nil {
		_ = conn.Close(ctx)
		log.FromContext(ctx).Info("Cannot check the replication slots on the primary", "primary", plan.CurrentPrimary, "error", err.Error())
		return nil, sqlOutcome{}, true
	}
	if !slotsToMend(plan.Slots, have) {
		_ = conn.Close(ctx)
		return nil, sqlOutcome{notes: unreservedNotes(plan, pods, have)}, true
	}
	s.ensured.Delete(db.UID) // all is ensured again, on this session
	return conn, sqlOutcome{}, false
}

// ensureOnPrimary sets, on conn to the primary, the synchronous standbys,
// the replication role's password, the slots and pg_rewind's grants.
func (s *syncer) ensureOnPrimary(ctx context.Context, conn instance.Conn, db *dbv1.Database, plan *Plan, pods map[string]*corev1.Pod, password, fingerprint string) (sqlOutcome, error) {
	// The controller's own statements never wait for a synchronous
	// standby: after a failover the new primary may still name standbys
	// that cannot confirm (its postgresql.auto.conf came from a clone or a
	// rewind), and the statement that fixes that must not queue behind
	// it, nor the slots the standbys need to stream.
	if _, err := conn.Exec(ctx, "SET synchronous_commit TO local"); err != nil {
		return sqlOutcome{}, fmt.Errorf("setting synchronous_commit for the controller's session: %w", err)
	}
	if err := ensureSynchronous(ctx, conn, standbyNames(plan.WantSynchronous)); err != nil {
		return sqlOutcome{}, err
	}
	if v, ok := s.synchronous.Load(db.UID); !ok || v.(SyncApplied).Primary != plan.CurrentPrimary || v.(SyncApplied).Names != standbyNames(plan.WantSynchronous) {
		s.synchronous.Store(db.UID, SyncApplied{Primary: plan.CurrentPrimary, Names: standbyNames(plan.WantSynchronous)})
	}
	if err := ensureReplicationRole(ctx, conn, password); err != nil {
		return sqlOutcome{}, err
	}
	have, err := listSlots(ctx, conn)
	if err != nil {
		return sqlOutcome{}, err
	}
	pending, err := s.ensureSlots(ctx, conn, db, plan, pods, have)
	if err != nil {
		return sqlOutcome{}, err
	}
	if err := ensureRewindGrants(ctx, conn); err != nil {
		return sqlOutcome{}, err
	}
	plan.Synchronous, plan.SynchronousSet = plan.SynchronousRecord, true
	if pending == "" {
		s.ensured.Store(db.UID, fingerprint)
	}
	return sqlOutcome{notes: unreservedNotes(plan, pods, have)}, nil
}

// ensureReplicationRole creates the replication role, or sets its
// password, unless its SCRAM verifier matches password.
func ensureReplicationRole(ctx context.Context, conn instance.Conn, password string) error {
	user := agentapi.ReplicationUser
	stored, exists, err := conn.QueryValue(ctx, fmt.Sprintf("SELECT rolpassword FROM pg_catalog.pg_authid WHERE rolname = %s", quoteLiteral(user)))
	if err != nil {
		return fmt.Errorf("reading role %s: %w", user, err)
	}
	if exists && stored != nil && engine.ScramVerifierMatches(*stored, password) {
		return nil
	}
	verifier, err := engine.ScramVerifier(password)
	if err != nil {
		return err
	}
	stmt := fmt.Sprintf("ALTER ROLE %s PASSWORD %s", quoteIdent(user), quoteLiteral(verifier))
	if !exists {
		stmt = fmt.Sprintf("CREATE ROLE %s WITH LOGIN REPLICATION PASSWORD %s", quoteIdent(user), quoteLiteral(verifier))
	}
	if err := roles.ExecUnlogged(ctx, conn, engine.Postgres{}, stmt); err != nil {
		return fmt.Errorf("keeping role %s: %w", user, err)
	}
	log.FromContext(ctx).Info("Set the replication role's password", "role", user, "created", !exists)
	return nil
}
