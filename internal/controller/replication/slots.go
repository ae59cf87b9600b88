package replication

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// ReasonReplicationSlotLost: a standby's slot on the primary had been
// invalidated (wal_status lost) and was made again.
const ReasonReplicationSlotLost = "ReplicationSlotLost"

// A standby's physical slot is invalidated when the standby falls more
// than max_slot_wal_keep_size behind (the cap the agent sets so that a
// standby gone for long cannot fill the primary's volume):
// pg_replication_slots.wal_status reads 'lost' (PostgreSQL 13 and later)
// and the slot keeps no WAL any more, for that standby nor for a new
// clone of it (PostgreSQL skips invalidated slots when it computes what
// to keep), and PostgreSQL 18 refuses a standby on it outright. Such a
// slot is dropped and made again, reserving WAL at once; a WAL sender
// that still holds it (its standby retries on it) is terminated first.
// The standby's agent clones it again once the primary says the WAL it
// needs is gone (internal/agent/walgone.go). 'unreserved' is a slot the
// next checkpoint may invalidate: ReplicationReady's message says so.

// slotsQuery lists dbkeeper's slots as "name=active=wal_status=active_pid,…".
const slotsQuery = `SELECT coalesce(string_agg(slot_name || '=' || active::text || '=' || coalesce(wal_status, '') || '=' || coalesce(active_pid::text, ''), ',' ORDER BY slot_name), '') FROM pg_catalog.pg_replication_slots WHERE slot_name LIKE 'dbkeeper\_%'`

// slotState is one of dbkeeper's slots as the primary lists it.
type slotState struct {
	active bool
	// walStatus is pg_replication_slots.wal_status: reserved, extended,
	// unreserved or lost ("" when not listed).
	walStatus string
	// pid is the process holding it, "" when none.
	pid string
}

// The wal_status values acted on.
const (
	walLost       = "lost"
	walUnreserved = "unreserved"
)

// listSlots lists dbkeeper's slots on the primary, by name.
func listSlots(ctx context.Context, conn instance.Conn) (map[string]slotState, error) {
	listed, _, err := conn.QueryValue(ctx, slotsQuery)
	if err != nil {
		return nil, fmt.Errorf("listing replication slots: %w", err)
	}
	have := map[string]slotState{}
	if listed == nil || *listed == "" {
		return have, nil
	}
	for _, entry := range strings.Split(*listed, ",") {
		f := strings.Split(entry, "=")
		st := slotState{active: len(f) > 1 && f[1] == "true"}
		if len(f) > 2 {
			st.walStatus = f[2]
		}
		if len(f) > 3 {
			st.pid = f[3]
		}
		have[f[0]] = st
	}
	return have, nil
}

// slotsToMend says whether ensureSlots has anything to do: a wanted slot
// missing or lost, or a slot of a removed instance left.
func slotsToMend(want []string, have map[string]slotState) bool {
	for _, slot := range want {
		if st, ok := have[slot]; !ok || st.walStatus == walLost {
			return true
		}
	}
	for slot := range have {
		if !containsString(want, slot) {
			return true
		}
	}
	return false
}

// ensureSlots makes each of plan.Slots that the primary lacks (have), makes
// again each one that was invalidated, and drops dbkeeper's inactive slots
// of instances that no longer exist. It returns what it waits for (a slot
// still held), "" when all is in place.
func (s *syncer) ensureSlots(ctx context.Context, conn instance.Conn, db *dbv1.Database, plan *Plan, pods map[string]*corev1.Pod, have map[string]slotState) (string, error) {
	var pending []string
	for _, slot := range plan.Slots {
		st, exists := have[slot]
		if exists && st.walStatus != walLost {
			continue
		}
		held, err := s.makeSlot(ctx, conn, db, plan, pods, slot, st, exists)
		if err != nil {
			return "", err
		}
		if held != "" {
			pending = append(pending, held)
		}
	}
	held, err := dropRemovedSlots(ctx, conn, plan.Slots, have)
	if err != nil {
		return "", err
	}
	pending = append(pending, held...)
	return strings.Join(pending, "; "), nil
}

// makeSlot makes slot on the primary, dropping it first when it exists
// (invalidated: st), after terminating the WAL sender that holds it. It
// returns what it waits for: an invalidated slot taken again meanwhile.
func (s *syncer) makeSlot(ctx context.Context, conn instance.Conn, db *dbv1.Database, plan *Plan, pods map[string]*corev1.Pod, slot string, st slotState, exists bool) (string, error) {
	standby := standbyOf(slot, plan, pods)
	if exists {
		if st.active {
			// its WAL sender would keep it from being dropped
			if _, err := conn.Exec(ctx, fmt.Sprintf("SELECT pg_catalog.pg_terminate_backend(active_pid, 5000) FROM pg_catalog.pg_replication_slots WHERE slot_name = %s AND active_pid IS NOT NULL",
				quoteLiteral(slot))); err != nil {
				return "", fmt.Errorf("terminating the WAL sender of the invalidated replication slot %s: %w", slot, err)
			}
			log.FromContext(ctx).Info("Terminated the WAL sender of an invalidated replication slot", "slot", slot, "standby", standby, "pid", st.pid)
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf("SELECT pg_catalog.pg_drop_replication_slot(%s)", quoteLiteral(slot))); err != nil {
			if inUse(err) {
				// taken again meanwhile: next time
				return fmt.Sprintf("the invalidated replication slot %s of %s is in use", slot, standby), nil
			}
			return "", fmt.Errorf("dropping the invalidated replication slot %s: %w", slot, err)
		}
		log.FromContext(ctx).Info("Dropped an invalidated replication slot", "slot", slot, "standby", standby)
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("SELECT pg_catalog.pg_create_physical_replication_slot(%s, true)", quoteLiteral(slot))); err != nil {
		return "", fmt.Errorf("creating replication slot %s: %w", slot, err)
	}
	log.FromContext(ctx).Info("Created replication slot", "slot", slot, "standby", standby, "remade", exists)
	if exists {
		s.remember(db, standby, slot, plan.CurrentPrimary)
		var related runtime.Object
		if pod := pods[standby]; pod != nil {
			related = pod
		}
		s.writer.Eventf(db, related, corev1.EventTypeWarning, ReasonReplicationSlotLost, "ReplicationSlot",
			"The replication slot %s of the standby %s on the primary %s had lost the WAL it kept (wal_status lost: %s fell more than max_slot_wal_keep_size behind); dropped it and made it again. %s is cloned again if the primary no longer has the WAL it needs",
			slot, standby, plan.CurrentPrimary, standby, standby)
	}
	return "", nil
}

// dropRemovedSlots drops dbkeeper's slots (have) that are not wanted: of
// instances that no longer exist. It returns those still in use.
func dropRemovedSlots(ctx context.Context, conn instance.Conn, want []string, have map[string]slotState) ([]string, error) {
	var pending []string
	names := make([]string, 0, len(have))
	for slot := range have {
		names = append(names, slot)
	}
	sort.Strings(names)
	for _, slot := range names {
		if containsString(want, slot) {
			continue
		}
		if have[slot].active {
			pending = append(pending, fmt.Sprintf("replication slot %s of a removed instance is still in use", slot))
			continue
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf("SELECT pg_catalog.pg_drop_replication_slot(%s)", quoteLiteral(slot))); err != nil {
			if inUse(err) {
				pending = append(pending, fmt.Sprintf("replication slot %s of a removed instance is in use", slot))
				continue
			}
			return nil, fmt.Errorf("dropping replication slot %s: %w", slot, err)
		}
		log.FromContext(ctx).Info("Dropped the replication slot of a removed instance", "slot", slot)
	}
	return pending, nil
}

// inUse says the statement was refused because the slot is active
// (SQLSTATE 55006, object_in_use).
func inUse(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "55006"
}

// standbyOf is the instance whose slot is slot.
func standbyOf(slot string, plan *Plan, pods map[string]*corev1.Pod) string {
	for name := range pods {
		if agentapi.SlotName(name) == slot {
			return name
		}
	}
	for _, row := range plan.Rows {
		if agentapi.SlotName(row.Name) == slot {
			return row.Name
		}
	}
	return strings.TrimPrefix(slot, "dbkeeper_")
}

// unreservedNotes are the wanted slots that the next checkpoint may
// invalidate, for ReplicationReady's message.
func unreservedNotes(plan *Plan, pods map[string]*corev1.Pod, have map[string]slotState) []string {
	var notes []string
	for _, slot := range plan.Slots {
		if have[slot].walStatus == walUnreserved {
			standby := standbyOf(slot, plan, pods)
			notes = append(notes, fmt.Sprintf("the replication slot %s of %s is about to lose the WAL it keeps on the primary %s (wal_status unreserved: %s is more than max_slot_wal_keep_size behind)",
				slot, standby, plan.CurrentPrimary, standby))
		}
	}
	return notes
}

// remadeSlot is a standby's slot made again because it was invalidated.
type remadeSlot struct {
	slot, primary string
}

// remember records that standby's slot on primary was made again.
func (s *syncer) remember(db *dbv1.Database, standby, slot, primary string) {
	m := map[string]remadeSlot{}
	if v, ok := s.remade.Load(db.UID); ok {
		for k, r := range v.(map[string]remadeSlot) {
			m[k] = r
		}
	}
	m[standby] = remadeSlot{slot: slot, primary: primary}
	s.remade.Store(db.UID, m)
}

// remadeNotes say, for ReplicationReady's message, which standbys that do
// not stream had their slot made again; a standby that streams again, or
// whose slot the primary no longer keeps, is forgotten.
func (s *syncer) remadeNotes(db *dbv1.Database, plan *Plan, insts []Instance) []string {
	v, ok := s.remade.Load(db.UID)
	if !ok {
		return nil
	}
	m := map[string]remadeSlot{}
	var notes []string
	for _, inst := range insts {
		r, ok := v.(map[string]remadeSlot)[inst.Name]
		if !ok || inst.streaming() || r.primary != plan.CurrentPrimary || !containsString(plan.Slots, r.slot) {
			continue
		}
		m[inst.Name] = r
		notes = append(notes, fmt.Sprintf("the replication slot %s of %s had lost its WAL on the primary %s (wal_status lost) and was made again; %s is cloned again if the primary no longer has the WAL it needs",
			r.slot, inst.Name, r.primary, inst.Name))
	}
	if len(m) == 0 {
		s.remade.Delete(db.UID)
	} else if len(m) != len(v.(map[string]remadeSlot)) {
		s.remade.Store(db.UID, m)
	}
	return notes
}
