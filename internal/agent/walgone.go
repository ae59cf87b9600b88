package agent

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// A standby whose primary no longer has the WAL it needs next retries for
// ever: its WAL receiver starts again every wal_retrieve_retry_interval
// and the primary answers "requested WAL segment ... has already been
// removed" every time. That happens when its replication slot was
// invalidated (the standby fell more than max_slot_wal_keep_size behind,
// wal_status 'lost', which the cap is for: a standby gone for long must
// not fill the primary's volume), or when it streamed without a slot.
// Unless an archive still has the segment (restore_command; replay then
// goes on), only a new copy of the primary helps: the agent empties the
// data directory and waits, Waiting, for the replication controller to
// clone it as it clones a new instance, once another instance certainly
// runs as the primary (otherPrimary). The lost slot itself is the
// replication controller's to drop and make again.

// walGoneCheck is how often the agent reads a standby's server output.
const walGoneCheck = 3 * time.Second

// walGoneAttempts is how many attempts of the WAL receiver in a row the
// primary must refuse so, while replay stays where it is, before the agent
// clones the standby again.
const walGoneAttempts = 3

// walGoneRE is the refusal in the standby's log (its WAL receiver's FATAL
// quotes the primary's ERROR).
var walGoneRE = regexp.MustCompile(`requested WAL segment ([0-9A-F]{24}) has already been removed`)

// walGoneWatch is what watchWALGone saw of one run of the server since
// replay last moved.
type walGoneWatch struct {
	srv *server
	// refusals is how many refusals the server's output held then.
	refusals int
	replay   string
}

// watchWALGone watches the standby's server until ctx ends, and has it
// cloned again once its WAL is gone from the primary (walGone).
func (a *Agent) watchWALGone(ctx context.Context) {
	var w walGoneWatch
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(walGoneCheck):
		}
		if segment, ok := a.walGone(ctx, &w); ok {
			a.recloneWhenWALGone(ctx, w.srv, segment)
			w = walGoneWatch{}
		}
	}
}

// walGone says whether the running standby's WAL receiver was refused its
// next segment (named) walGoneAttempts times since its replay last moved,
// as w (updated) recorded.
func (a *Agent) walGone(ctx context.Context, w *walGoneWatch) (string, bool) {
	a.mu.Lock()
	srv, state := a.srv, a.state
	a.mu.Unlock()
	if srv == nil || state != agentapi.StateRunning || !isStandby(a.cfg.PGData) {
		*w = walGoneWatch{}
		return "", false
	}
	var replay string
	if err := a.queryRow(ctx, "SELECT COALESCE(pg_last_wal_replay_lsn()::text, '')", &replay); err != nil {
		return "", false
	}
	refusals := walGoneRE.FindAllStringSubmatch(srv.output.lines(0), -1)
	// a new server, replay that moved, or an output tail that was cut
	// starts the count again.
	if w.srv != srv || w.replay != replay || len(refusals) < w.refusals {
		*w = walGoneWatch{srv: srv, refusals: len(refusals), replay: replay}
		return "", false
	}
	if len(refusals)-w.refusals < walGoneAttempts {
		return "", false
	}
	return refusals[len(refusals)-1][1], true
}

// recloneWhenWALGone stops the standby srv, whose primary no longer has
// WAL segment segment, and empties its data directory to be cloned again
// (reclone), when another instance certainly runs as the primary
// (otherPrimary: the reason this standby's data is no only copy);
// otherwise it says why not in the status and leaves it as it is.
func (a *Agent) recloneWhenWALGone(ctx context.Context, srv *server, segment string) {
	if !a.op.TryLock() {
		return // another operation runs: seen again later
	}
	defer a.op.Unlock()
	a.mu.Lock()
	same := a.srv == srv && a.state == agentapi.StateRunning
	a.mu.Unlock()
	if !same || !isStandby(a.cfg.PGData) {
		return
	}
	why := fmt.Sprintf("the primary no longer has WAL segment %s, which this standby needs next (its replication slot was invalidated, or it streamed without one)", segment)
	primary, keep := a.otherPrimary(ctx)
	if primary == "" {
		a.log.Info("The standby cannot stream, and its data directory is kept", "segment", segment, "why", keep)
		a.mu.Lock()
		if a.srv == srv && a.state == agentapi.StateRunning {
			a.message = why + "; not cloning it again: " + keep
		}
		a.mu.Unlock()
		return
	}
	a.log.Info("The standby cannot stream: stopping it to be cloned again", "segment", segment, "primary", primary)
	if err := a.stopServer(ctx); err != nil {
		a.fail(err)
		return
	}
	if err := a.reclone(fmt.Sprintf("%s (%s runs as the primary)", why, primary)); err != nil {
		a.fail(err)
	}
}
